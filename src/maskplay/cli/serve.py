"""`maskplay serve MODEL`: an HTTP server for one model (OpenAI-shaped embeddings and completions, per-token
scores, a page at /); docs/guides/serving.md."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from typing import Any

from ..runtime.precision import Precision
from ..tasks.serve.limits import Limits
from .common import non_negative_float, non_negative_int, positive_int
from .summaries import summary

AUTO = "auto"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help=summary("serve"),
                       description="Serve one model over HTTP with dynamic batching (docs/guides/serving.md).")
    p.add_argument("model_dir", metavar="MODEL", help="a model directory or a bundled model's name")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=non_negative_int, default=8000)
    p.add_argument("--name", default=None, help="the model id clients send as `model` (default: the directory's name)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
    p.add_argument("--precision", choices=[AUTO, *(x.value for x in Precision)], default=AUTO,
                   help="auto (default): bf16 where this machine runs it faster than fp32, else fp32")
    p.add_argument("--max-batch-size", type=positive_int, default=32, metavar="N",
                   help="inputs per model call when requests are batched together (default 32)")
    p.add_argument("--max-wait-ms", type=non_negative_float, default=5.0, metavar="MS",
                   help="how long the oldest request waits for others to join its batch (default 5)")
    p.add_argument("--no-batching", dest="batching", action="store_false",
                   help="one model call per request, as it arrives (the load benchmark's baseline)")
    p.add_argument("--max-queue", type=positive_int, default=256, metavar="N",
                   help="requests waiting at most; one more is answered 503 with Retry-After (default 256)")
    p.add_argument("--max-tokens", type=positive_int, default=None, metavar="N",
                   help="tokens per input with [SOS]/[EOS] at most (default and most: the model's max_position)")
    p.add_argument("--max-body-bytes", type=positive_int, default=1 << 20, metavar="N",
                   help="a request body over this is answered 413 (default 1 MiB)")
    limits = Limits()
    p.add_argument("--max-request-pieces", type=positive_int, default=limits.pieces, metavar="N",
                   help=f"word pieces over all inputs of one /v1/score or /v1/embeddings request at most (default "
                        f"{limits.pieces})")
    p.add_argument("--max-request-windows", type=positive_int, default=limits.windows, metavar="N",
                   help=f"windows one /v1/embeddings request with overflow 'window' splits into at most (default "
                        f"{limits.windows})")
    p.add_argument("--max-request-tokens", type=positive_int, default=limits.generated, metavar="N",
                   help=f"prompts x n x max_tokens of one /v1/completions request at most (default "
                        f"{limits.generated})")
    p.add_argument("--allowed-hosts", nargs="+", default=None, metavar="NAME",
                   help="Host header names the server answers (default: the --host it is bound to and the loopback "
                        "names; any name when bound to 0.0.0.0; '*' for any): a guard against DNS rebinding")
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..tasks.serve.app import create_app
    except ImportError as err:
        raise ValueError(f"maskplay serve needs the serve extra ({err.name} is missing): "
                         "pip install 'maskplay[serve]'") from None
    from ..runtime.devices import resolve_device
    from ..runtime.precision_probe import resolve_cli
    from ..tasks.serve.batching import Batcher
    from ..tasks.serve.guards import default_allowed_hosts
    from ..tasks.serve.service import ModelService

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    if args.max_body_bytes < 1:
        raise ValueError(f"--max-body-bytes must be at least 1, got {args.max_body_bytes}")
    listening = bind(args.host, args.port)  # a taken port is found before the model is loaded
    batcher = Batcher(args.max_batch_size, args.max_wait_ms, args.max_queue, enabled=args.batching)
    device = resolve_device(args.device)
    precision = resolve_cli(args.precision, device, model_dir=args.model_dir, rows=args.max_batch_size * 32,
                            command="serve")
    limits = Limits(args.max_request_pieces, args.max_request_windows, args.max_request_tokens)
    service = ModelService(args.model_dir, device, precision, max_tokens=args.max_tokens, name=args.name,
                           limits=limits)
    hosts = args.allowed_hosts or default_allowed_hosts(args.host)
    app = create_app(service, batcher, max_body_bytes=args.max_body_bytes, allowed_hosts=hosts)
    port = listening.getsockname()[1]
    print(f"maskplay serve: {service.name} ({service.family}, {service.precision.value}) on "
          f"http://{args.host}:{port}/ (batching {'on' if args.batching else 'off'})", file=sys.stderr, flush=True)
    server = _Server(uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=5), batcher)
    try:
        server.run(sockets=[listening])
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled: the server has stopped cleanly
        pass
    return 0


def _server_class() -> type:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, which on a stop signal first answers the requests waiting for the model (503,
        shutting down), so that none is cancelled with a traceback at the end of the grace period."""

        def __init__(self, config: Any, batcher: Any) -> None:
            super().__init__(config)
            self.batcher = batcher

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            try:
                asyncio.get_running_loop().call_soon_threadsafe(self.batcher.close)
            except RuntimeError:  # no loop running (not started yet): nothing waits
                pass

    return Server


def _Server(config: Any, batcher: Any) -> Any:  # noqa: N802 - a class made on demand (uvicorn is optional)
    return _server_class()(config, batcher)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, made before anything slow: a port in use or an address this machine lacks is one
    line naming it, not an error after the model has loaded."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise ValueError(f"--host {host} --port {port}: cannot listen there ({err.strerror or err})") from None
    sock.set_inheritable(True)
    return sock
