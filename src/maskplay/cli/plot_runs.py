"""`maskplay plot-runs`: held-out loss curves of several training runs in one picture (maskplay.tasks.report)."""

from __future__ import annotations

import argparse
import json

from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot-runs", help=summary("plot-runs"))
    p.add_argument("runs", nargs="+", help="run directories of `maskplay pretrain`")
    p.add_argument("--out", default="runs.png")
    p.add_argument("--title", default="held-out loss")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # matplotlib is imported only when a picture is drawn, not each time the parser is built
    from ..tasks.report import plot_runs, summary_rows

    out = plot_runs(args.runs, args.out, title=args.title)
    for row in summary_rows(args.runs):
        print(json.dumps(row))
    print(f"wrote {out}")
    return 0
