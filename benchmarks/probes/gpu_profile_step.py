"""Where a strict-small recipe's training step spends its time on a GPU: the step as
gpu_train_speed.py --recipe times it (the recipe's architecture at 12 x 384, LAMB, bf16 autocast, a whole optimizer
step, eager), a few steps under torch.profiler, and per step: the wall time, the time the GPU spent in kernels
(so how long it sat idle, waiting on the host), the kernels launched, the host synchronisations (the CUDA runtime's
synchronising calls and the operators that read a device value back), and the operators that took the most kernel
time. Small on purpose: a profile through the trainer on an H200 (2026-11-28; profile_train.py, 30 steps with the data
loader) trained in 24 s and then spent the rest of its 110-s limit building its table.

`--bias gather one-hot` profiles the step once per kernel of the disentangled score bias
(attention/disentangled.py: torch.gather, whose backward is an atomic scatter-add on a GPU, or one-hot matrix
products), in one run; `flex` profiles it with no bias at all, through FlexAttention (run.flex_attention,
attention/flex.py: the terms and the mask read inside its kernel; a CUDA device only).

    python3 benchmarks/probes/gpu_profile_step.py --device cuda --out profile.json            # about a minute on an H200
    python3 benchmarks/probes/gpu_profile_step.py --device cuda --families gpt-bert tta --bias gather one-hot
    python benchmarks/probes/gpu_profile_step.py --tiny --device cpu --steps 1               # a dry run on a CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import machine  # noqa: E402
from gpu_train_speed import Cases, shapes  # noqa: E402

from maskplay.nn.attention import disentangled, flex  # noqa: E402

# the CUDA runtime calls that block the host until the device has caught up, and the operators that read a device
# value back (item(), bool(), int() of a tensor; nonzero and boolean indexing, whose output size the host must learn)
SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
SYNC_OPS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique2"}


def device_time(event) -> float:  # noqa: ANN001
    """An averaged event's own kernel time in microseconds (the attribute's name changed across torch versions)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(event, name):
            return float(getattr(event, name))
    return 0.0


def profile_case(family: str, bias: str, args: argparse.Namespace) -> dict:
    disentangled.bias_kernel = "gather" if bias == "flex" else bias
    flex.enabled = bias == "flex"
    device = torch.device(args.device)
    shape = replace(shapes(args.tiny)["babylm"], **({"batch": args.batch} if args.batch else {}),
                    **({"seq_len": args.seq_len} if args.seq_len else {}))
    step, *_ = Cases(argparse.Namespace(compile="off", recipe_compile="off"), device).ours(shape, family, recipe=True)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    walls = []
    for _ in range(args.timed):
        start = time.perf_counter()
        step()
        sync()
        walls.append(time.perf_counter() - start)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.steps):
            step()
        sync()
    per = 1.0 / args.steps
    events = prof.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernel_us = sum(e.time_range.elapsed_us() for e in kernels) * per  # a device event's own span
    syncs = {name: sum(1 for e in events if e.name == name) * per for name in sorted(SYNC_CALLS | SYNC_OPS)}
    averages = prof.key_averages()
    on_device = device.type == "cuda"
    top = sorted(averages, key=(lambda e: device_time(e)) if on_device else (lambda e: e.self_cpu_time_total),
                 reverse=True)[:args.rows]
    wall_ms = 1000 * statistics.median(walls)
    rows = [{"op": e.key, "calls": e.count * per,
             "ms": (device_time(e) if on_device else e.self_cpu_time_total) * per / 1000} for e in top]
    return {"family": family, "bias": bias, "shape": vars(shape), "step_ms": wall_ms,
            "kernel_ms": kernel_us / 1000 if on_device else None,
            "gpu_busy": kernel_us / 1000 / wall_ms if on_device else None,
            "kernels": len(kernels) * per if on_device else None,
            "syncs": {k: v for k, v in syncs.items() if v} if on_device else None, "top": rows}


def show(row: dict) -> None:
    busy = "" if row["gpu_busy"] is None else (f", kernels {row['kernel_ms']:.1f} ms ({row['gpu_busy']:.0%} busy), "
                                               f"{row['kernels']:.0f} launches")
    print(f"\n{row['family']} (bias: {row['bias']}): step {row['step_ms']:.1f} ms{busy}")
    if row["syncs"] is None:  # every read is free on a CPU, and its step reads host-only tensors too
        print("  host synchronisations: a GPU's only (on a CPU, benchmarks/probes/step_syncs.py counts where they would be)")
    else:
        print("  host synchronisations a step:", ", ".join(f"{k} {v:g}" for k, v in row["syncs"].items()) or "none")
    print(f"  {'operator':<60}{'calls':>8}{'ms':>9}")
    for r in row["top"]:
        print(f"  {r['op'][:58]:<60}{r['calls']:>8.0f}{r['ms']:>9.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["gpt-bert"], choices=["gpt", "bert", "tta", "gpt-bert"])
    p.add_argument("--bias", nargs="+", default=["gather"], choices=[*disentangled.BIAS_KERNELS, "flex"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=0, help="rows a step (default: the recipe's 256; 4 with --tiny)")
    p.add_argument("--seq-len", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timed", type=int, default=5, help="steps timed without the profiler (their median)")
    p.add_argument("--steps", type=int, default=3, help="steps profiled")
    p.add_argument("--rows", type=int, default=25, help="operators in the table")
    p.add_argument("--tiny", action="store_true", help="the 2 x 32 shape, for a dry run")
    p.add_argument("--out", default=None, help="write the results as JSON here (after every case)")
    args = p.parse_args()
    result = {"machine": machine(), "device": args.device, "torch": torch.__version__, "args": vars(args), "rows": []}
    print(result["machine"], flush=True)
    for family in args.families:
        for bias in args.bias:
            row = profile_case(family, bias, args)
            result["rows"].append(row)
            show(row)
            if args.out:
                Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
