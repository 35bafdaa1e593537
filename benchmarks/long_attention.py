"""Long-sequence attention: time and peak memory of one attention layer (hidden 256, 4 heads, batch 1) against
sequence length, for dense SDPA under a bool mask, the banded sliding-window kernel, FlexAttention (compiled,
forward only on CPU) and Reformer's LSH attention, with each case's ratio against dense in the same run.

    python benchmarks/long_attention.py
    python benchmarks/long_attention.py --lengths 256 1024 4096 --rounds 3 --cases dense banded

The layer: x (1, L, 256) -> q, k, v projections -> attention -> output projection. The mask is T-TA's
(no diagonal) inside a sliding window of `--window` keys on each side, all tokens real: dense SDPA computes it
from the materialised (1, 1, L, L) mask (built once per batch, as the backbone does, outside the timing; its
size is reported apart), the banded kernel and FlexAttention from the mask functions (FlexAttention's block mask
is built once per batch too; its build time is reported apart). Dense and banded give the same numbers
(tests/nn/test_sparse_attention.py); FlexAttention the same; LSH (shared QK, --lsh-hashes rounds, chunks of
--lsh-chunk, L / --lsh-chunk buckets, the same no-diagonal mask) a different, approximate attention.

Time: the cases of one length interleaved round by round in this process (load from other processes hits them
alike); the minimum and the median over rounds. A training step is forward + backward to the input and the
weights. FlexAttention has no backward on CPU: no training step for it.

Peak memory: one fresh subprocess per case, length and mode, started with MALLOC_MMAP_THRESHOLD_=65536 so that
glibc serves every large block with mmap and returns it on free (the resident set then follows live memory).
The subprocess runs the call once (lazy initialisation, compilation), calls malloc_trim(0), resets the kernel's
resident high-water mark (writing 5 to /proc/self/clear_refs), runs the call again and reports VmHWM minus the
VmRSS at the reset: every byte the call made resident, torch's tensors and any kernel's scratch alike (tracemalloc
sees neither). Inputs, weights and the per-batch masks exist before the reset and are not counted.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

from maskplay.nn.attention.banded import (
    band_block_mask,
    band_mask,
    flex_sliding_window_attention,
    masked_attention,
    sliding_window_attention,
)
from maskplay.nn.attention.long_masks import materialize_heads  # noqa: E402
from maskplay.nn.attention.reformer import lsh_attention, random_rotations  # noqa: E402
from maskplay.nn.masks import and_masks, no_diagonal, padding  # noqa: E402

HIDDEN, HEADS, BATCH = 256, 4, 1
CASES = ("dense", "banded", "flex", "lsh")
ROOT = Path(__file__).resolve().parents[1]


class Layer(torch.nn.Module):
    """One attention layer around a pluggable attention call."""

    def __init__(self, case: str, length: int, args: argparse.Namespace) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.case, self.length, self.args = case, length, args
        # LSH shares one projection for queries and keys (Reformer); the others project q, k, v apart
        self.proj = torch.nn.Linear(HIDDEN, (2 if case == "lsh" else 3) * HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, HIDDEN)
        real = torch.ones(BATCH, length, dtype=torch.bool)
        self.mask_mod = and_masks(no_diagonal(), padding(real))
        self.setup_seconds = 0.0
        start = time.perf_counter()
        if case == "dense":
            self.dense_mask = materialize_heads(band_mask(args.window, self.mask_mod), BATCH, 1, length).contiguous()
        elif case == "flex":
            self.block_mask = band_block_mask(length, args.window, self.mask_mod, batch=BATCH)
        elif case == "lsh":
            self.rotations = random_rotations(HIDDEN // HEADS, HEADS, max(2, length // args.lsh_chunk),
                                              args.lsh_hashes, torch.Generator().manual_seed(0))
        self.setup_seconds = time.perf_counter() - start

    def setup_bytes(self) -> int:
        """Bytes of the per-batch mask the case needs before any layer runs."""
        if self.case == "dense":
            return self.dense_mask.numel() * self.dense_mask.element_size()
        if self.case == "flex":
            return sum(t.numel() * t.element_size() for t in (self.block_mask.kv_num_blocks, self.block_mask.kv_indices))
        return 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        heads = [t.view(B, L, HEADS, -1).transpose(1, 2) for t in self.proj(x).chunk(2 if self.case == "lsh" else 3, -1)]
        a = self.args
        if self.case == "dense":
            o = masked_attention(*heads, self.dense_mask)
        elif self.case == "banded":
            o = sliding_window_attention(*heads, a.window, self.mask_mod, chunk=a.chunk)
        elif self.case == "flex":
            o = flex_sliding_window_attention(*heads, a.window, self.mask_mod, block_mask=self.block_mask)
        else:
            qk, v = heads
            o = lsh_attention(qk, v, self.rotations.shape[-1] * 2, a.lsh_hashes, a.lsh_chunk, self.mask_mod,
                              rotations=self.rotations)
        return self.out(o.transpose(1, 2).reshape(B, L, HIDDEN))


def calls(layer: Layer, length: int) -> dict[str, Callable[[], object]]:
    """The measured calls of one case: an inference forward and, where there is a backward, a training step."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, length, HIDDEN, generator=g)
    x_train = x.clone().requires_grad_(True)
    direction = torch.randn(BATCH, length, HIDDEN, generator=g)

    def forward() -> object:
        with torch.no_grad():
            return layer(x)

    def train() -> object:
        layer.zero_grad(set_to_none=True)
        x_train.grad = None
        (layer(x_train) * direction).sum().backward()
        return None

    return {"forward": forward} if layer.case == "flex" else {"forward": forward, "train": train}


def status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def worker(case: str, length: int, mode: str, args: argparse.Namespace) -> None:
    """Peak resident bytes one call adds (see the module's docstring); printed as JSON."""
    torch.set_num_threads(args.threads)
    layer = Layer(case, length, args)
    fn = calls(layer, length)[mode]
    fn()  # lazy initialisation and compilation are not the call's memory
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status_bytes("VmRSS")
    fn()
    peak = status_bytes("VmHWM")
    print(json.dumps({"peak_bytes": peak - base}))


def measure_memory(case: str, length: int, mode: str, args: argparse.Namespace) -> int | None:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS=str(args.threads))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", case, str(length), mode,
           "--threads", str(args.threads), "--window", str(args.window), "--chunk", str(args.chunk or 0),
           "--lsh-hashes", str(args.lsh_hashes), "--lsh-chunk", str(args.lsh_chunk)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if run.returncode != 0:
        print(f"  memory of {case} {mode} at {length}: worker failed: {run.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])["peak_bytes"]


def time_length(length: int, cases: list[str], args: argparse.Namespace) -> dict[str, dict]:
    layers = {c: Layer(c, length, args) for c in cases}
    results: dict[str, dict] = {c: {"setup_ms": round(layers[c].setup_seconds * 1e3, 2),
                                    "setup_mib": round(layers[c].setup_bytes() / 2**20, 3)} for c in cases}
    for mode in ("forward", "train"):
        fns = {c: calls(layers[c], length).get(mode) for c in cases}
        fns = {c: fn for c, fn in fns.items() if fn is not None}
        for c, fn in fns.items():
            start = time.perf_counter()
            fn()  # warm-up (FlexAttention compiles here)
            if c == "flex" and mode == "forward":
                results[c]["compile_s"] = round(time.perf_counter() - start, 1)
        times: dict[str, list[float]] = {c: [] for c in fns}
        for _ in range(args.rounds):
            for c, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[c].append(time.perf_counter() - start)
        for c, ts in times.items():
            results[c][f"{mode}_ms_min"] = round(min(ts) * 1e3, 3)
            results[c][f"{mode}_ms_median"] = round(statistics.median(ts) * 1e3, 3)
    return results


def plot(rows: list[dict], path: Path, window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"forward": "-", "train": "--"}
    colors = {"dense": "tab:red", "banded": "tab:blue", "flex": "tab:green", "lsh": "tab:purple"}
    for case in CASES:
        for mode in ("forward", "train"):
            pts = [(r["length"], r.get(f"{mode}_ms_min"), r.get(f"{mode}_peak_mib")) for r in rows
                   if r["case"] == case and r.get(f"{mode}_ms_min") is not None]
            if not pts:
                continue
            label = f"{case} {mode}"
            axes[0].plot([p[0] for p in pts], [p[1] for p in pts], styles[mode], marker="o", color=colors[case],
                         label=label)
            mem = [p for p in pts if p[2] is not None]
            axes[1].plot([p[0] for p in mem], [max(p[2], 1e-2) for p in mem], styles[mode], marker="o",
                         color=colors[case], label=label)
    axes[0].set_ylabel("ms per call (min of rounds)")
    axes[1].set_ylabel("peak MiB added by the call (per-batch mask apart)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"One attention layer (hidden {HIDDEN}, {HEADS} heads, batch {BATCH}); window ±{window}, "
                 "T-TA mask; train = forward + backward")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    p.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    p.add_argument("--window", type=int, default=128, help="keys on each side of the query")
    p.add_argument("--chunk", type=int, default=None, help="banded kernel's queries per block (default: its own)")
    p.add_argument("--lsh-hashes", type=int, default=2)
    p.add_argument("--lsh-chunk", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-memory", action="store_true", help="time only")
    p.add_argument("--out", default="results/long-context/long_attention.json")
    p.add_argument("--plot", default="docs/results/long_attention.png")
    p.add_argument("--replot", action="store_true", help="redraw --plot from --out without measuring")
    p.add_argument("--worker", nargs=3, metavar=("CASE", "LENGTH", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.chunk == 0:
        args.chunk = None
    if args.worker:
        case, length, mode = args.worker
        worker(case, int(length), mode, args)
        return
    if args.replot:
        report = json.loads((ROOT / args.out).read_text())
        plot(report["rows"], ROOT / args.plot, report["layer"]["window_each_side"])
        print(f"wrote {args.plot}")
        return

    torch.set_num_threads(args.threads)
    print(machine())
    rows: list[dict] = []
    for length in args.lengths:
        timed = time_length(length, args.cases, args)
        for case in args.cases:
            row = {"case": case, "length": length, **timed[case]}
            if not args.no_memory:
                for mode in ("forward", "train"):
                    if f"{mode}_ms_min" in row:
                        peak = measure_memory(case, length, mode, args)
                        row[f"{mode}_peak_mib"] = None if peak is None else round(peak / 2**20, 2)
            rows.append(row)
        dense = next((r for r in rows if r["case"] == "dense" and r["length"] == length), None)
        for row in rows:
            if row["length"] != length or dense is None:
                continue
            for mode in ("forward", "train"):
                if f"{mode}_ms_min" in row:
                    row[f"{mode}_speedup_vs_dense"] = round(dense[f"{mode}_ms_min"] / row[f"{mode}_ms_min"], 2)
                if row.get(f"{mode}_peak_mib") and dense.get(f"{mode}_peak_mib"):
                    row[f"{mode}_memory_vs_dense"] = round(row[f"{mode}_peak_mib"] / dense[f"{mode}_peak_mib"], 3)
        for row in (r for r in rows if r["length"] == length):
            print(f"L={length:>5} {row['case']:<7} fwd {row['forward_ms_min']:>9.2f} ms "
                  f"({row.get('forward_speedup_vs_dense', '-')}x) {row.get('forward_peak_mib', '-')} MiB | train "
                  f"{row.get('train_ms_min', float('nan')):>9.2f} ms ({row.get('train_speedup_vs_dense', '-')}x) "
                  f"{row.get('train_peak_mib', '-')} MiB", flush=True)

    report = {
        "command": "python benchmarks/long_attention.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "cpu_model": cpu_model(),
        "threads": args.threads,
        "layer": {"hidden": HIDDEN, "heads": HEADS, "batch": BATCH, "mask": "T-TA no-diagonal, all tokens real",
                  "window_each_side": args.window, "banded_chunk": args.chunk or max(args.window, 64),
                  "lsh": {"hashes": args.lsh_hashes, "chunk": args.lsh_chunk, "buckets": "L / chunk"}},
        "time": "min and median over rounds of the cases interleaved; ms per call",
        "memory": "peak resident bytes the call adds: VmHWM after the call minus VmRSS at a reset of the "
                  "high-water mark (/proc/self/clear_refs), one fresh subprocess per measurement, "
                  "MALLOC_MMAP_THRESHOLD_=65536, after a warm-up call and malloc_trim(0)",
        "setup": "setup_ms / setup_mib: the per-batch mask (dense: the L x L bool mask; flex: the block mask), "
                 "built once per batch, not in the per-call figures",
        "rows": rows,
    }
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    if args.plot:
        plot(rows, ROOT / args.plot, args.window)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
