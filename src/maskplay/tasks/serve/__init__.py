"""`maskplay serve MODEL`: an HTTP server (FastAPI + uvicorn) for one model, with dynamic batching.

app.py (the routes: create_app), batching.py (requests arriving together share one model call), completions.py
(OpenAI's completions, streaming), errors.py (OpenAI's error object, the body limit), schemas.py (request bodies),
service.py (the model's work through Scorer, Embedder and generate), static/index.html (the page at /).
docs/guides/serving.md describes the endpoints. Needs the `serve` extra: pip install 'maskplay[serve]'; nothing here is
imported with this package, so maskplay works without it."""
