"""A strict-small recipe's training step (configs/babylm/: forward, backward, LAMB, bf16 autocast; step_ops.py's
step) timed in this tree and in another checkout's source, in fresh processes alternated round by round, so that
both see the same machine load; prints each round and the ratio of the medians.

    git worktree add --detach ../before <commit>
    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/probes/step_time.py --against ../before --rows 4 --rounds 4 \
        --out results/probes/denseformer-stream/cpu-against-b803a30-rows4.json

The other checkout only lends its `src/`: this tree's benchmark code builds the step for both (its recipe configs
and model builder must exist there too)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from common import machine, median_time  # noqa: E402


def one(family: str, rows: int, warmup: int, steps: int) -> float:
    """This process: the median step seconds (imports the package only here, from PYTHONPATH's tree)."""
    import torch
    from step_ops import ours

    torch.set_num_threads(1)
    return median_time(ours(family, [], rows), steps, warmup)


def in_fresh_process(src: Path, args: argparse.Namespace) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, __file__, "--one", "--family", args.family, "--rows", str(args.rows),
                          "--warmup", str(args.warmup), "--steps", str(args.steps)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--against", type=Path, help="another checkout (a git worktree) whose src/ to time too")
    p.add_argument("--family", default="gpt-bert", choices=["gpt", "bert", "tta", "gpt-bert"])
    p.add_argument("--rows", type=int, default=4, help="rows of 128 tokens a step")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.one:
        print(one(args.family, args.rows, args.warmup, args.steps))
        return
    trees = {"this": REPO / "src", **({"against": args.against.resolve() / "src"} if args.against else {})}
    seconds: dict[str, list[float]] = {name: [] for name in trees}
    for k in range(args.rounds):
        for name, src in trees.items():
            seconds[name].append(in_fresh_process(src, args))
        print(f"round {k + 1}: " + ", ".join(f"{n} {1000 * s[-1]:.0f} ms" for n, s in seconds.items()), flush=True)
    result = {"machine": machine(), "case": f"{args.family} recipe", "tokens": args.rows * 128,
              "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "against"},
              "step_ms": {n: [1000 * x for x in s] for n, s in seconds.items()}}
    if args.against:
        result["against_commit"] = subprocess.run(["git", "-C", str(args.against), "rev-parse", "--short", "HEAD"],
                                                  capture_output=True, text=True).stdout.strip()
        result["speed_up"] = statistics.median(seconds["against"]) / statistics.median(seconds["this"])
        print(f"median {1000 * statistics.median(seconds['against']):.0f} -> "
              f"{1000 * statistics.median(seconds['this']):.0f} ms: {result['speed_up']:.2f}x "
              f"(against {result['against_commit']})")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
