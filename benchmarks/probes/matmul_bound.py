"""How fast could a training step be, if it were only its matmuls? The forward and backward matrix products of one
step of a model of a preset's size (every layer's projections and attention, the LM head over every position), each
timed alone at its own shape in the given precision, against this machine's 2048^3 matmul peak: the step's MFU
cannot pass this bound however little the other operations cost. Compare it with a measured step's MFU
(benchmarks/train_speed.py) to see how much of a ratio is left to take, and with HuggingFace's MFU to see the
largest ratio two implementations of the same FLOPs can have.

    python benchmarks/probes/matmul_bound.py --preset mini --batch-size 16 --seq-len 128 --dtype fp32
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import best_time, machine, matmul_peak  # noqa: E402

from maskplay import preset  # noqa: E402


def step_products(hidden: int, ffn: int, vocab: int, layers: int, heads: int, batch: int,
                  seq: int) -> list[tuple[str, int, int, int, int]]:
    """(name, count, m, k, n) of every forward product of a step; backward doubles each (dX and dW)."""
    n = batch * seq
    d = hidden // heads
    per_layer = [("q, k, v", 1, n, hidden, 3 * hidden), ("attention scores", batch * heads, seq, d, seq),
                 ("attention x values", batch * heads, seq, seq, d), ("attention out", 1, n, hidden, hidden),
                 ("FFN up", 1, n, hidden, ffn), ("FFN down", 1, n, ffn, hidden)]
    products = [(name, count * layers, m, k, nn) for name, count, m, k, nn in per_layer]
    return [*products, ("head transform", 1, n, hidden, hidden), ("vocabulary projection", 1, n, hidden, vocab)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    cfg = preset(args.preset, family="bert")
    peak = matmul_peak(dtype)
    rows, total_flops, total_seconds = [], 0.0, 0.0
    for name, count, m, k, n in step_products(cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size,
                                              cfg.num_layers, cfg.num_heads, args.batch_size, args.seq_len):
        a, b, g = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype), torch.randn(m, n, dtype=dtype)
        products = ((a, b), (g, b.t()), (a.t(), g))  # the forward, dX, dW
        seconds = sum(best_time(lambda x=x, y=y: torch.mm(x, y), repeats=5, warmup=1) for x, y in products)
        flops = 3 * 2 * m * k * n
        rows.append((name, count, flops * count, seconds * count))
        total_flops += flops * count
        total_seconds += seconds * count
    print(machine())
    print(f"{args.preset} (hidden {cfg.hidden_size}, FFN {cfg.intermediate_size}, vocab {cfg.vocab_size}, "
          f"{cfg.num_layers} layers), batch {args.batch_size} x {args.seq_len}, {args.dtype}; "
          f"2048^3 peak {peak / 1e9:.0f} GFLOP/s")
    print(f"{'product (forward, dX, dW)':<28} {'count':>6} {'GFLOP':>8} {'ms':>8} {'of peak':>8}")
    for name, count, flops, seconds in rows:
        print(f"{name:<28} {count:>6} {flops / 1e9:>8.2f} {seconds * 1e3:>8.1f} {flops / seconds / peak:>7.0%}")
    print(f"{'all matmuls':<28} {'':>6} {total_flops / 1e9:>8.2f} {total_seconds * 1e3:>8.1f} "
          f"{total_flops / total_seconds / peak:>7.0%}  <- no step of these FLOPs runs above this MFU")


if __name__ == "__main__":
    main()
