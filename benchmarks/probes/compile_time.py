"""Compiling a strict-small recipe: how long the first training steps take under torch.compile (compiling included),
the steady step time after, and what dynamo counted (graph breaks, recompiles, frames, graphs), for each
run.compile_scope, "step" (the whole forward and loss, every layer unrolled into one graph) and "layers" (each block
compiled alone, one code reused by every layer: nn/regional.py), with the eager step as the baseline, in one run.

Each case is what gpu_train_speed.py --recipe times (its Cases.ours: the recipe's architecture at the 12 x 384 shape,
LAMB, bf16 autocast, a full optimizer step), at a small batch (--batch x --seq-len) so that a step is cheap and the
compile dominates: the compile's work depends on the graph (layers, width, ops), not on the batch. Caches are off
and dynamo is reset before each case, so every case compiles cold, as a fresh GPU machine does. Graph breaks and
recompiles are facts of the code, the same on any machine; the seconds are this machine's (a CPU's inductor
compile is a proxy for a GPU's: C++ kernels there, Triton here).

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/probes/compile_time.py --out compile-time.json
    python benchmarks/probes/compile_time.py --tiny --steps 1          # a dry run: 2 x 32 models
    python benchmarks/probes/compile_time.py --scopes step --backend aot_eager   # tracing alone, no inductor
    python3 benchmarks/probes/compile_time.py --device cuda --batch 256 --out compile-time-gpu.json   # on a GPU machine
    python3 benchmarks/probes/compile_time.py --device cuda --batch 256 --families gpt-bert --scopes eager step --flex \
        --warm-cache --out compile.json       # as gpu_one_call.sh runs it with FLEX=1
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch._dynamo
import torch._inductor.config

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import machine  # noqa: E402
from gpu_train_speed import Cases, shapes  # noqa: E402

from maskplay.nn.attention import flex  # noqa: E402

SCOPES = ("eager", "layers", "step", "nested")


def dynamo_counts() -> dict[str, int]:
    """What dynamo counted since the last reset: graph breaks, recompiles (guard failures that compiled again),
    frames compiled and the graphs they made."""
    from torch._dynamo.utils import counters, guard_failures

    return {"graph_breaks": sum(counters["graph_break"].values()),
            "recompiles": sum(len(v) for v in guard_failures.values()),
            "frames": counters["frames"]["total"], "graphs": counters["stats"]["unique_graphs"]}


def run_case(family: str, scope: str, args: argparse.Namespace) -> dict:
    """The first steps one by one (compiling happens here), then the median of --steps steps."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    shape = replace(shapes(args.tiny)["babylm"], batch=args.batch, seq_len=args.seq_len,
                    **({"layers": args.layers} if args.layers else {}))
    device = torch.device(args.device)
    cases = Cases(argparse.Namespace(compile="off", recipe_compile="off" if scope == "eager" else scope,
                                     backend=args.backend), device)
    step, *_ = cases.ours(shape, family, recipe=True)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def timed() -> float:
        start = time.perf_counter()
        step()
        sync()
        return time.perf_counter() - start

    first = [timed(), timed()]  # the first compiles forward and backward; the second shows any recompile
    times = [timed() for _ in range(args.steps)]
    steady = statistics.median(times)
    gc.collect()
    return {"family": family, "scope": scope, "shape": vars(shape), "first_step_s": first[0],
            "second_step_s": first[1], "step_ms": 1000 * steady,
            "compile_s": first[0] + first[1] - 2 * steady, **dynamo_counts()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["gpt-bert", "tta"], choices=["gpt", "bert", "tta", "gpt-bert"])
    p.add_argument("--scopes", nargs="+", default=list(SCOPES), choices=SCOPES)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--layers", type=int, default=None, help="default: the recipe's 12 (2 with --tiny)")
    p.add_argument("--steps", type=int, default=3, help="timed steps after the first two")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine (then try --batch 256)")
    p.add_argument("--tiny", action="store_true", help="the 2 x 32 models, for a dry run")
    p.add_argument("--backend", default="inductor", choices=["inductor", "aot_eager"],
                   help="aot_eager: dynamo's and AOTAutograd's tracing alone, the part of a compile that runs on "
                        "one thread on any machine (inductor's kernels compile in parallel on a GPU machine's cores)")
    p.add_argument("--out", default=None, help="write the results as JSON here (after every case)")
    p.add_argument("--flex", action="store_true", help="attention through FlexAttention (run.flex_attention; a CUDA "
                   "device only: a CPU's FlexAttention has no backward)")
    p.add_argument("--warm-cache", action="store_true",
                   help="leave inductor's on-disk caches on, so that a later process on this machine (the training "
                        "run gpu_one_call.sh starts after) may compile the same graphs from them; on a fresh machine "
                        "the first case still compiles cold")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    flex.enabled = args.flex
    if not args.warm_cache:
        torch._inductor.config.force_disable_caches = True  # every case compiles cold, as a fresh machine does
    result = {"machine": machine(), "device": args.device, "torch": torch.__version__, "args": vars(args), "rows": []}
    print(result["machine"], flush=True)
    print(f"{'family':<10}{'scope':<8}{'first s':>9}{'second s':>10}{'compile s':>11}{'step ms':>9}{'x eager':>9}"
          f"{'breaks':>8}{'recompiles':>12}{'frames':>8}{'graphs':>8}", flush=True)
    for family in args.families:
        eager_ms = None
        for scope in args.scopes:
            row = run_case(family, scope, args)
            eager_ms = row["step_ms"] if scope == "eager" else eager_ms
            if eager_ms:
                row["step_vs_eager"] = row["step_ms"] / eager_ms
            result["rows"].append(row)
            print(f"{family:<10}{scope:<8}{row['first_step_s']:>9.1f}{row['second_step_s']:>10.1f}"
                  f"{row['compile_s']:>11.1f}{row['step_ms']:>9.0f}{row.get('step_vs_eager', float('nan')):>9.2f}"
                  f"{row['graph_breaks']:>8}{row['recompiles']:>12}{row['frames']:>8}{row['graphs']:>8}", flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
