"""`maskplay grow`: a bigger model that computes what a smaller one computes (maskplay.tasks.grow)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .common import positive_int
from .summaries import summary

if TYPE_CHECKING:
    pass


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..tasks import grow

    p = sub.add_parser("grow", help=summary("grow"),
                       description=grow.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", metavar="MODEL", help="a model directory (or bundled name)")
    p.add_argument("--layers", type=positive_int, default=None, help="blocks of the grown model (default: unchanged)")
    p.add_argument("--hidden", type=positive_int, default=None,
                   help="hidden size, a multiple of the model's (default: unchanged)")
    p.add_argument("--heads", type=positive_int, default=None, help="heads (default: grown with the hidden size)")
    p.add_argument("--out", required=True, metavar="DIR", help="the new model directory (must not exist)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..families import MaskplayModel
    from ..runtime.model_dir import resolve_model_dir, write_model_dir
    from ..tasks.grow import grow, largest_difference

    source = resolve_model_dir(args.model_dir)
    out = Path(args.out)
    if out.exists():
        raise ValueError(f"--out {out} already exists; choose a new directory")
    small = MaskplayModel.from_pretrained(source)
    grown = grow(small, args.layers, args.hidden, args.heads)
    difference = largest_difference(small, grown.model)
    write_model_dir(grown.model, out, tokenizer_from=source)
    c, b = small.config, grown.model.config
    print(f"wrote {out}: {c.num_layers} x {c.hidden_size} ({c.num_heads} heads) -> {b.num_layers} x {b.hidden_size} "
          f"({b.num_heads} heads), {small.num_parameters():,} -> {grown.model.num_parameters():,} parameters")
    kind = "exact" if grown.exact else "not exact: " + "; ".join(grown.reasons)
    print(f"{kind}; largest logit difference on a random batch: {difference:.2e}")
    return 0
