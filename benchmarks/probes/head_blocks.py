"""Why heads.ROW_BLOCK exists: the vocabulary projection (N x H) @ (H x V) in bf16, as one matmul and in row
blocks, interleaved in one run (a dropped block's `.sum()` stands for the log-softmax that reads it). On the
project's CPU one call with a large output runs well below the machine's bf16 peak; 256-row blocks run near it.

    python benchmarks/probes/head_blocks.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import interleaved, machine, matmul_peak  # noqa: E402

SHAPES = [(4096, 256, 16384, "mini training step, 32 x 128 tokens"),
          (4096, 512, 29530, "tta-paper training step, 32 x 128 tokens"),
          (864, 512, 29530, "tta-paper one-pass scoring batch, 32 sentences")]


def make_cases(x: torch.Tensor, w: torch.Tensor, blocks: list[int]) -> dict[str, Callable[[], object]]:
    n = x.shape[0]
    buffer = torch.empty(n, w.shape[0], dtype=x.dtype)
    cases: dict[str, Callable[[], object]] = {"one matmul": lambda: torch.mm(x, w.t())}
    for b in blocks:
        # training: the blocks fill one (N, V) buffer (heads._LinearCrossEntropy); scoring: each block is
        # consumed and dropped before the next (heads.linear_log_probs)
        cases[f"{b} rows, to buffer"] = lambda b=b: [torch.mm(x[s:s + b], w.t(), out=buffer[s:s + b])
                                                     for s in range(0, n, b)]
        cases[f"{b} rows, dropped"] = lambda b=b: [torch.mm(x[s:s + b], w.t()).sum() for s in range(0, n, b)]
    return cases


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=int, nargs="+", default=[64, 128, 256, 512])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print(machine())
    print(f"bf16 matmul peak (2048^3): {matmul_peak(torch.bfloat16) / 1e9:.0f} GFLOP/s")
    for n, h, v, what in SHAPES:
        x = torch.randn(n, h, dtype=torch.bfloat16)
        w = torch.randn(v, h, dtype=torch.bfloat16)
        seconds = interleaved(make_cases(x, w, args.blocks), args.rounds)
        print(f"\n({n} x {h}) @ ({h} x {v}): {what}")
        for name, s in seconds.items():
            print(f"  {name:<20}{s * 1e3:>8.1f} ms {2 * n * h * v / s / 1e9:>6.0f} GFLOP/s")


if __name__ == "__main__":
    main()
