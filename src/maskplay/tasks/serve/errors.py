"""Errors a client can act on, all as OpenAI's error object: {"error": {"message", "type", "param", "code"}}.

- malformed JSON, a missing field, a wrong type: 400 (FastAPI's own answer is a 422 in another shape);
- a body over --max-body-bytes: 413, before it is read whole (FastAPI alone reads any size);
- an input over the model's or the server's token limit, or a max_tokens past the model's context: 400, code
  context_length_exceeded (OpenAI's: param the field at fault), naming the limit;
- a `model` that is not the one served: 404, code model_not_found;
- the queue is full: 503 with Retry-After; the server is stopping: 503 (code shutting_down);
- anything else a request triggers: 500 with the error's one line; the server goes on."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .batching import QueueFull, ShuttingDown

log = logging.getLogger("maskplay.tasks.serve")

# OpenAI's error types: a request's own fault, or the server's (an overloaded or stopping one included)
TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 405: "invalid_request_error",
         413: "invalid_request_error", 503: "server_error", 500: "server_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": TYPES.get(status, "invalid_request_error"), "param": param,
                      "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def _validation_message(err: RequestValidationError) -> tuple[str, str | None]:
    """One line naming the field: pydantic reports a union's failure once per branch; say it once."""
    found = err.errors()
    first = found[0] if found else {}
    if first.get("type") == "json_invalid":
        return f"the body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg', ''))}", None
    where = [p for p in first.get("loc", ()) if p != "body"]
    param = str(where[0]) if where else None
    if first.get("type") == "missing" and len(where) <= 1:
        return f"missing required field {param!r}" if param else "the body must be a JSON object", param
    got = f" (got {first['input']!r})"[:200] if "input" in first else ""
    if param is None:
        return f"the body must be a JSON object with the endpoint's fields{got}", None
    branches = {tuple(e.get("loc", ()))[:2] for e in found}
    if len(found) > 1 and len(branches) == 1:
        return f"{param} has the wrong type or value{got}", param
    return f"{param}: {first.get('msg', 'invalid value')}{got}", param


def install(app: FastAPI) -> None:
    """The exception handlers above, on `app`."""

    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, err: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(err)
        return error_response(400, message[:500], param, "invalid_value" if param else "invalid_json")

    @app.exception_handler(APIError)
    async def api_error(request: Request, err: APIError) -> JSONResponse:
        return error_response(err.status, err.message, err.param, err.code, err.headers)

    @app.exception_handler(ShuttingDown)
    async def shutting_down(request: Request, err: ShuttingDown) -> JSONResponse:
        return error_response(503, str(err), None, "shutting_down", {"Retry-After": "5", "Connection": "close"})

    @app.exception_handler(QueueFull)
    async def queue_full(request: Request, err: QueueFull) -> JSONResponse:
        return error_response(503, str(err), None, "queue_full", {"Retry-After": "1"})

    @app.exception_handler(ValueError)
    async def value_error(request: Request, err: ValueError) -> JSONResponse:
        return error_response(400, str(err).splitlines()[0][:500] if str(err) else "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        return error_response(err.status_code, str(err.detail), None, None, getattr(err, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("request %s %s failed", request.method, request.url.path)
        return error_response(500, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:500])


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 (OpenAI's error shape) without being
    read whole: at once from its Content-Length, or as soon as the bytes received pass the limit."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        chunks, size = [], 0
        while True:  # read the body here (at most limit bytes), then replay it to the app
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(send)
                return
            chunks.append(message)
            if not message.get("more_body", False):
                break
        replay = iter(chunks)

        async def replayed() -> dict:
            try:
                return next(replay)
            except StopIteration:
                return await receive()

        await self.app(scope, replayed, send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps(error_body(413, f"the request body is over the server's limit of {self.limit:,} bytes "
                                          "(--max-body-bytes); send fewer or shorter inputs per request",
                                     None, "request_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
