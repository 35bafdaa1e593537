"""The FastAPI application: OpenAI's /v1/embeddings and /v1/completions, maskplay's /v1/score, vLLM's tokenizer
routes (so that lm-eval's local-completions client with tokenizer_backend=remote evaluates this server as it would
a vLLM one), /health, /v1/models, the page at / and the OpenAPI description at /docs (made here: no CDN)."""

from __future__ import annotations

import base64
import functools
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from pydantic_core import to_json

from ..score import SentenceScore
from ..score.explain import COLOURS, SCALE, colour_of, explain
from . import completions, errors
from .batching import Batcher
from .docs import docs_page
from .errors import APIError
from .guards import RequestGuard
from .schemas import CompletionRequest, DetokenizeRequest, EmbeddingRequest, Request, ScoreRequest, TokenizeRequest
from .service import EmbedOptions, ModelService

PAGE = Path(__file__).parent / "static" / "index.html"
DEFAULT_MAX_BODY = 1 << 20  # 1 MiB: some 200k words of input per request


@functools.cache
def xterm_hex(code: int) -> str:
    """An xterm 256-colour code of the 6x6x6 cube (16..231) as #rrggbb: the CLI's --explain colours on the page."""
    k = code - 16
    level = [0 if v == 0 else 55 + 40 * v for v in (k // 36, (k // 6) % 6, k % 6)]
    return "#" + "".join(f"{v:02x}" for v in level)


def colour_hex(surprisal: float) -> str:
    """The page's colour of a surprisal (xterm_hex is cached: eight colours, made once each)."""
    return xterm_hex(colour_of(surprisal))


def json_body(content: Any) -> Response:
    """A JSON response of plain dicts and lists, serialised by pydantic-core without FastAPI's response-model
    pass (a validation of every nested value first): per-request work on the event loop, which the model's thread
    waits for under load (docs/guides/serving.md). A non-finite float becomes null, as FastAPI's own path writes it."""
    return Response(to_json(content, inf_nan_mode="null"), media_type="application/json")


def create_app(service: ModelService, batcher: Batcher, max_body_bytes: int = DEFAULT_MAX_BODY,
               allowed_hosts: list[str] | None = None) -> FastAPI:
    """The app; `allowed_hosts`: the Host header names it answers (None: any; guards.default_allowed_hosts)."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title=f"maskplay serve {service.name}", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="OpenAI-shaped embeddings and completions, maskplay's per-token scores, vLLM's "
                              "tokenizer routes. Errors are OpenAI's error object.")
    app.add_middleware(errors.BodyLimit, limit=max_body_bytes)
    app.add_middleware(RequestGuard, allowed_hosts=allowed_hosts)  # added last: runs first
    errors.install(app)
    _info_routes(app, service, batcher)
    _model_routes(app, service, batcher)
    _tokenizer_routes(app, service)
    return app


def check_model(request: Request, service: ModelService) -> None:
    if request.model is not None and request.model != service.name:
        raise APIError(404, f"the model {request.model!r} does not exist here; this server serves {service.name!r}",
                       "model", "model_not_found")


def _info_routes(app: FastAPI, service: ModelService, batcher: Batcher) -> None:
    started = int(time.time())

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(docs_page(app.openapi()))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        s = batcher.stats
        return {"status": "ok", "model": service.name, "family": service.family,
                "batching": {"enabled": batcher.enabled, "max_batch_size": batcher.max_batch_size,
                             "max_wait_ms": batcher.max_wait * 1000, "running": batcher.running,
                             "queued": len(batcher.pending),
                             "max_queue": batcher.max_queue, "requests": s.jobs, "items": s.items,
                             "model_calls": s.calls, "largest_batch": s.largest, "refused": s.refused}}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": service.name, "object": "model", "created": started, "owned_by": "maskplay",
            "family": service.family, "max_model_len": service.max_tokens, "can_generate": service.can_generate,
            "causal": service.causal, "score_method": service.method()}]}


def _model_routes(app: FastAPI, service: ModelService, batcher: Batcher) -> None:
    scale = {"bounds": list(SCALE), "colours": [xterm_hex(c) for c in COLOURS]}

    @app.post("/v1/embeddings", response_model=None)
    async def embeddings(request: EmbeddingRequest) -> Response:
        check_model(request, service)
        texts = [request.input] if isinstance(request.input, str) else list(request.input)
        if not texts:
            raise APIError(400, "input is an empty list", "input")
        counts = service.check_texts(texts, "input", request.overflow)
        width = service.embedding_width(request.static)
        if request.dimensions is not None and request.dimensions != width:
            raise APIError(400, f"dimensions: this model's vectors have {width} dimensions, got {request.dimensions}",
                           "dimensions")
        options = EmbedOptions(request.pooling, request.layer, request.normalize, request.diagonal_mask,
                               request.static, request.overflow)
        vectors = await batcher.submit(("embed", options), texts, lambda batch: service.embed(batch, options))

        def encoded(v: np.ndarray) -> Any:
            v = np.asarray(v, dtype="<f4")
            return base64.b64encode(v.tobytes()).decode() if request.encoding_format == "base64" else v.tolist()

        tokens = sum(counts) + 2 * len(texts)
        return json_body({"object": "list", "model": service.name,
                          "data": [{"object": "embedding", "index": k, "embedding": encoded(v)}
                                   for k, v in enumerate(vectors)],
                          "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    @app.post("/v1/completions", response_model=None)
    async def complete(request: CompletionRequest) -> Any:
        check_model(request, service)
        if request.stream:
            events = await completions.stream(request, service, batcher)
            return StreamingResponse(events, media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return json_body(await completions.complete(request, service, batcher))

    @app.post("/v1/score", response_model=None)
    async def score(request: ScoreRequest) -> Response:
        check_model(request, service)
        texts = [request.input] if isinstance(request.input, str) else list(request.input)
        if not texts:
            raise APIError(400, "input is an empty list", "input")
        service.check_texts(texts, "input")
        scores = await batcher.submit(("score",), texts, service.score)
        return json_body({"object": "list", "model": service.name, "method": service.method(),
                          "replaced": service.replaced(),
                          "scale": scale,
                          "data": [score_record(k, s, request.explain) for k, s in enumerate(scores)]})


def score_record(index: int, s: SentenceScore, with_explanation: bool) -> dict[str, Any]:
    """One sentence's scores: per piece (span, log p, surprisal, colour), per word, the odd word out."""
    replaced = s.replaced_probs
    tokens = []
    for k, (token, (start, end), lp) in enumerate(zip(s.tokens, s.offsets, s.token_log_probs, strict=True)):
        entry = {"token": token, "start": start, "end": end, "log_prob": lp, "surprisal": -lp,
                 "colour": colour_hex(-lp)}
        if replaced is not None:
            entry["replaced_prob"] = replaced[k]
        tokens.append(entry)
    words = [{"text": w.text, "start": w.start, "end": w.end, "surprisal": w.surprisal, "pieces": list(w.pieces)}
             for w in s.words()]
    out = {"index": index, "text": s.text, "log_prob": s.log_prob, "num_tokens": s.num_tokens,
           "mean_log_prob": s.mean_log_prob, "method": s.method, "windows": s.windows, "tokens": tokens,
           "words": words}
    if with_explanation:
        out["odd_word_out"] = max(words, key=lambda w: w["surprisal"])
        out["explanation"] = explain(s, colour=False)
    return out


def _tokenizer_routes(app: FastAPI, service: ModelService) -> None:
    @app.post("/tokenize")
    async def tokenize(request: TokenizeRequest) -> dict[str, Any]:
        check_model(request, service)
        ids = service.tokenize(request.prompt, request.add_special_tokens)
        return {"tokens": ids, "count": len(ids), "max_model_len": service.max_tokens}

    @app.post("/detokenize")
    async def detokenize(request: DetokenizeRequest) -> dict[str, Any]:
        check_model(request, service)
        return {"prompt": service.detokenize(request.tokens)}

    @app.get("/tokenizer_info")
    async def tokenizer_info() -> dict[str, Any]:
        return service.tokenizer_info()
