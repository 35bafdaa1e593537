"""A roofline estimate of a strict-small recipe's training step on a GPU, made on a CPU: every operator the step
calls (forward, loss, backward, clip, LAMB; bf16 autocast as on the GPU), its FLOPs (torch.utils.flop_counter's
formulas: matrix products and attention) and the bytes it reads and writes (its tensors' sizes), counted at --rows
and twice as many rows and extrapolated to the recipe's 256 (at a fixed length each operator's cost is a part that
does not grow with the rows, such as the optimizer's, and one in proportion to them), and priced at a
GPU's peak: an operator takes max(FLOPs / (peak x --flop-eff), bytes / (bandwidth x --byte-eff)), and at least
--min-kernel-us (a kernel's launch and tail). The sum is what the step would take if the device were the only
bottleneck, and the table says which operators would take it.

An H200 ran the GPT-BERT recipe step in 110 ms on 2026-11-28 (docs/results/training-speed.md);
an estimate far below that says the time goes where this does not look (the host, its synchronisations, kernels far
slower than their bytes, such as atomic scatter-adds); one near it says which operators to make cheaper.

    python benchmarks/probes/step_roofline.py --families gpt-bert gpt bert tta \
        --out results/gpu/babylm-gpt-bert-one-call-h200/roofline.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from step_syncs import recipe_step  # noqa: E402

# an H200 SXM: bf16 dense peak and HBM3e bandwidth (NVIDIA's figures)
PEAK_FLOPS, BANDWIDTH = 989e12, 4.8e12
# operators that move no data of their own (views, metadata) or whose work the operators inside them count
FREE = {"view", "_unsafe_view", "as_strided", "expand", "t", "transpose", "permute", "unsqueeze", "squeeze", "select",
        "slice", "detach", "alias", "_reshape_alias", "unflatten", "split", "split_with_sizes", "unbind", "chunk",
        "narrow", "empty", "empty_strided", "empty_like", "lift_fresh", "_local_scalar_dense", "is_nonzero", "size",
        "stride", "resolve_conj", "resolve_neg", "set_", "sym_size", "sym_stride", "view_as", "expand_as"}


def tensor_bytes(t: torch.Tensor) -> int:
    """The bytes an operator touches in `t`: its elements, but no more than its storage holds (an expanded view
    reads each stored element once)."""
    try:
        stored = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        stored = t.numel() * t.element_size()
    return min(t.numel() * t.element_size(), stored)


class Roofline(TorchDispatchMode):
    """Each operator's calls, FLOPs and bytes (inputs read, outputs written), by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0, "flops": 0.0, "bytes": 0.0})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in FREE:
            return out
        packet = func.overloadpacket
        flops = flop_registry[packet](*args, **kwargs, out_val=out) if packet in flop_registry else 0
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        # what it reads and what it writes: an in-place operator's output is its input, read and written
        moved = sum(tensor_bytes(t) for t in inputs + outputs)
        row = self.ops[name]
        row["calls"] += 1
        row["flops"] += flops
        row["bytes"] += moved
        return out


def extrapolate(small: dict[str, dict[str, float]], large: dict[str, dict[str, float]], rows: tuple[int, int],
                batch: int) -> dict[str, dict[str, float]]:
    """Each operator's counts at `batch` rows from its counts at two row counts: a part that does not grow with the
    rows (the parameters' updates, the weights a product reads) and one that grows in proportion (activations)."""
    (r1, r2), out = rows, {}
    for name in small.keys() | large.keys():
        zero = {"calls": 0, "flops": 0.0, "bytes": 0.0}
        a, b = small.get(name, zero), large.get(name, zero)
        out[name] = {k: max(0.0, b[k] + (b[k] - a[k]) * (batch - r2) / (r2 - r1)) for k in ("flops", "bytes")}
        out[name]["calls"] = b["calls"]
    return out


def estimate(ops: dict[str, dict[str, float]], args: argparse.Namespace) -> list[dict]:
    rows = []
    for name, r in ops.items():
        flops, moved, calls = r["flops"], r["bytes"], r["calls"]
        compute = flops / (PEAK_FLOPS * args.flop_eff)
        memory = moved / (BANDWIDTH * args.byte_eff)
        seconds = max(compute + memory if args.no_overlap else max(compute, memory), calls * args.min_kernel_us * 1e-6)
        rows.append({"op": name, "calls": calls, "gflops": flops / 1e9, "gbytes": moved / 1e9, "ms": seconds * 1e3,
                     "bound": "launch" if seconds == calls * args.min_kernel_us * 1e-6 else
                     ("compute" if compute > memory else "memory")})
    return sorted(rows, key=lambda r: -r["ms"])


class NoMarks:  # recipe_step's step marks the batch as moved for step_syncs; nothing to mark here
    @staticmethod
    def mark(_tensors) -> None:  # noqa: ANN001
        return None


def count(family: str, rows: int, sets: list[str]) -> dict[str, dict[str, float]]:
    step, _ = recipe_step(family, rows, sets)
    step(NoMarks)  # lazy set-up and the optimizer's state outside the count
    with Roofline() as counter:
        step(NoMarks)
    return dict(counter.ops)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["gpt-bert"], choices=["gpt", "bert", "tta", "gpt-bert"])
    p.add_argument("--rows", type=int, default=4, help="count at this many rows of 128 tokens and twice as many, "
                   "and extrapolate each operator to --batch")
    p.add_argument("--batch", type=int, default=256, help="the recipe's rows a step")
    p.add_argument("--flop-eff", type=float, default=0.6, help="the share of the peak a matrix product reaches")
    p.add_argument("--byte-eff", type=float, default=0.7, help="the share of the bandwidth a memory-bound kernel reaches")
    p.add_argument("--min-kernel-us", type=float, default=4.0, help="the least time a kernel takes")
    p.add_argument("--no-overlap", action="store_true", help="an operator's compute and memory times add up")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model overrides")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    result = {"args": vars(args), "peak_flops": PEAK_FLOPS, "bandwidth": BANDWIDTH, "families": {}}
    for family in args.families:
        counts = [count(family, rows, args.set) for rows in (args.rows, 2 * args.rows)]
        rows = estimate(extrapolate(*counts, (args.rows, 2 * args.rows), args.batch), args)
        total = sum(r["ms"] for r in rows)
        kernels = sum(r["calls"] for r in rows)
        result["families"][family] = {"estimate_ms": total, "operators": kernels,
                                      "gflops": sum(r["gflops"] for r in rows),
                                      "gbytes": sum(r["gbytes"] for r in rows), "top": rows[:args.top]}
        print(f"{family} recipe at {args.batch} x 128: {total:.1f} ms estimated on a GPU's roofline, {kernels} operators, "
              f"{result['families'][family]['gflops'] / 1e3:.2f} TFLOP, {result['families'][family]['gbytes']:.1f} GB")
        print(f"  {'operator':<40}{'calls':>7}{'GFLOP':>10}{'GB':>9}{'ms':>8}  bound")
        for r in rows[:args.top]:
            print(f"  {r['op'][:38]:<40}{r['calls']:>7}{r['gflops']:>10.1f}{r['gbytes']:>9.2f}{r['ms']:>8.2f}  {r['bound']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
