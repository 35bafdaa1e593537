"""`maskplay serve MODEL`: an HTTP server for one model (OpenAI-shaped embeddings and completions, per-token
scores, a page at /); docs/SERVE.md."""

from __future__ import annotations

import argparse
import sys

from ..precision import Precision
from ..serve.limits import Limits
from .common import non_negative_float, non_negative_int, positive_int

AUTO = "auto"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="an HTTP server: OpenAI-shaped /v1/embeddings and /v1/completions, /v1/score, "
                                     "a page at / (needs maskplay[serve])",
                       description="Serve one model over HTTP with dynamic batching (docs/SERVE.md).")
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
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..serve.app import create_app
    except ImportError as err:
        raise ValueError(f"maskplay serve needs the serve extra ({err.name} is missing): "
                         "pip install 'maskplay[serve]'") from None
    from ..devices import resolve_device
    from ..precision_probe import resolve_cli
    from ..serve.batching import Batcher
    from ..serve.service import ModelService

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    if args.max_body_bytes < 1:
        raise ValueError(f"--max-body-bytes must be at least 1, got {args.max_body_bytes}")
    batcher = Batcher(args.max_batch_size, args.max_wait_ms, args.max_queue, enabled=args.batching)
    device = resolve_device(args.device)
    precision = resolve_cli(args.precision, device, model_dir=args.model_dir, rows=args.max_batch_size * 32,
                            command="serve")
    limits = Limits(args.max_request_pieces, args.max_request_windows, args.max_request_tokens)
    service = ModelService(args.model_dir, device, precision, max_tokens=args.max_tokens, name=args.name,
                           limits=limits)
    app = create_app(service, batcher, max_body_bytes=args.max_body_bytes)
    print(f"maskplay serve: {service.name} ({service.family}, {service.precision.value}) on "
          f"http://{args.host}:{args.port}/ (batching {'on' if args.batching else 'off'})", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    return 0
