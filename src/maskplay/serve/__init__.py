"""`maskplay serve MODEL`: an HTTP server (FastAPI + uvicorn) for one model, with dynamic batching.

app.py (the routes), batching.py (requests arriving together share one model call), completions.py (OpenAI's
completions, streaming), errors.py (OpenAI's error object, the body limit), schemas.py (request bodies),
service.py (the model's work through Scorer, Embedder and generate), static/index.html (the page at /).
docs/SERVE.md describes the endpoints. Needs the `serve` extra: pip install 'maskplay[serve]'."""

from __future__ import annotations

from typing import Any


def create_app(*args: Any, **kwargs: Any) -> Any:
    """maskplay.serve.app.create_app (imported on use: fastapi is an optional dependency)."""
    from .app import create_app as create

    return create(*args, **kwargs)


__all__ = ["create_app"]
