"""DenseFormer's buffered stream against its list stream (nn/denseformer.py), in one run: a strict-small recipe's
training step (configs/babylm/: 12 x 384, forward, backward, LAMB, bf16 autocast) with each, alternated, and the
operators each step calls (benchmarks/probes/step_ops.py's count: what a GPU launches).

The list stream stacks every earlier state for every weighted sum and lets autograd accumulate each state's gradient
from every later sum, O(S^2) copies and kernels for S sub-layers; the buffered one writes each state once and updates
all earlier gradients in one kernel a sum.

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/probes/denseformer_stream.py --rows 4 \
        --out results/probes/denseformer-stream/cpu.json

The operator counts are exact; the times alternate the streams in one process, which overstated the gain at 512
tokens (1.16x here against 1.04x from fresh processes): benchmarks/probes/step_time.py times a step against another commit
in fresh processes, the figure docs/results/benchmarks.md quotes first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import PeakRSS, machine  # noqa: E402
from step_ops import count_ops, ours  # noqa: E402

from maskplay.nn.denseformer import BufferedStream, DepthWeights, ListStream  # noqa: E402

STREAMS = {"list": ListStream, "buffered": BufferedStream}


def use(kind: str) -> None:
    """Every DenseFormer pass from now on runs `kind`'s stream (the model decides buffered or not otherwise)."""
    DepthWeights.stream = lambda self, x0, buffered: STREAMS[kind](self, x0)  # type: ignore[method-assign]


def peak_memory_mb(family: str, kind: str, rows: int) -> float:
    """The resident-memory growth of one step after a warm one, in a process of its own (an allocator keeps what
    an earlier step freed, so two streams in one process would share a peak)."""
    out = subprocess.run([sys.executable, __file__, "--families", family, "--rows", str(rows), "--memory-of", kind],
                         check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["gpt-bert"], choices=["gpt", "bert", "tta", "gpt-bert"])
    p.add_argument("--rows", type=int, default=4, help="rows of 128 tokens a step")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds of --steps steps for each stream")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--memory", action="store_true", help="also each stream's peak memory (a process each)")
    p.add_argument("--memory-of", choices=list(STREAMS), help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.memory_of:
        use(args.memory_of)
        step = ours(args.families[0], [], args.rows)
        step()
        with PeakRSS() as rss:
            step()
        print((rss.peak - rss.start) / 2**20)
        return
    result = {"machine": machine(), "threads": torch.get_num_threads(), "args": vars(args), "rows": []}
    print(result["machine"], flush=True)
    for family in args.families:
        step = ours(family, [], args.rows)
        ops = {}
        for kind in STREAMS:
            use(kind)
            ops[kind] = count_ops(step)  # also the warm-up: the optimizer's state exists after it
        times: dict[str, list[float]] = {kind: [] for kind in STREAMS}
        for _ in range(args.rounds):
            for kind in STREAMS:
                use(kind)
                start = time.perf_counter()
                for _ in range(args.steps):
                    step()
                times[kind].append((time.perf_counter() - start) / args.steps)
        ms = {kind: 1000 * statistics.median(t) for kind, t in times.items()}
        row = {"case": f"{family} recipe", "tokens": args.rows * 128, "step_ms": ms, "operators": ops,
               "speed_up": ms["list"] / ms["buffered"], "all_ms": {k: [1000 * x for x in t] for k, t in times.items()}}
        if args.memory:
            row["peak_memory_mb"] = {kind: peak_memory_mb(family, kind, args.rows) for kind in STREAMS}
        result["rows"].append(row)
        memory = (f", peak memory {row['peak_memory_mb']['list']:.0f} -> {row['peak_memory_mb']['buffered']:.0f} MB"
                  if args.memory else "")
        print(f"{row['case']}: step {ms['list']:.0f} -> {ms['buffered']:.0f} ms ({row['speed_up']:.2f}x), "
              f"operators {ops['list']:,} -> {ops['buffered']:,}{memory}", flush=True)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
