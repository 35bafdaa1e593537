"""Checks on every request before a route sees it (ASGI middleware), each answered in OpenAI's error shape:

- the Host header must name the server (the names it is bound to, or --allowed-hosts): a web page can otherwise
  reach a server on 127.0.0.1 through DNS rebinding (its own name made to resolve to 127.0.0.1);
- a POST's Content-Type must be JSON (application/json or */*+json): a form or text body is named by its header,
  not reported as a body of the wrong shape."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .errors import error_body

ANY_HOST = "*"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")


def default_allowed_hosts(host: str) -> list[str]:
    """The Host names a server bound to `host` accepts unless told otherwise: a loopback server its loopback
    names; one bound to an address, that address and the loopback names; one bound to every interface (0.0.0.0)
    any name (its names are not known here: give --allowed-hosts to restrict it)."""
    if host in WILDCARD_ADDRESSES:
        return [ANY_HOST]
    return list(dict.fromkeys([host.strip("[]").lower(), *LOOPBACK_NAMES]))


def host_name(header: str) -> str:
    """The name in a Host header, without its port: "[::1]:8000" -> "::1", "Example.org:80" -> "example.org"."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class RequestGuard:
    def __init__(self, app: Any, allowed_hosts: Sequence[str] | None = None) -> None:
        self.app = app
        names = [ANY_HOST] if allowed_hosts is None else [h.strip("[]").lower() for h in allowed_hosts]
        self.any_host, self.hosts = ANY_HOST in names, set(names)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            host = host_name(headers.get(b"host", b"").decode("latin-1"))
            if not self.any_host and host not in self.hosts:
                await refuse(send, 400, f"the Host header {host!r} is not a name of this server (it accepts "
                                        f"{sorted(self.hosts)}; start it with --allowed-hosts to add names)",
                             "invalid_host")
                return
            if scope.get("method") == "POST":
                kind = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
                if kind != "application/json" and not kind.endswith("+json"):
                    await refuse(send, 400, "the Content-Type header must be application/json, got "
                                            f"{kind or 'none'!r}"[:300], "invalid_content_type")
                    return
        await self.app(scope, receive, send)


async def refuse(send: Any, status: int, message: str, code: str) -> None:
    body = json.dumps(error_body(status, message, None, code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
