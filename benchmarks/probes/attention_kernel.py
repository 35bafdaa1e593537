"""Attention in training on a CPU: SDPA's kernel against attention written out (q k^T, masked softmax, times v),
forward and backward, and what the choice does to a whole training step.

    OMP_NUM_THREADS=1 python benchmarks/probes/attention_kernel.py --out results/probes/attention-kernel.json

1. The kernel alone: 4 heads of 64, a causal mask with right padding (rows of L/2..L tokens), B x L = 2,048
   tokens, L from 16 to 256, in bf16 and fp32; the median of interleaved rounds.
2. A training step of the two-hour model's shape (4 x 256, pre-LN, SwiGLU, rotary; 64 rows of 12-32 tokens, bf16
   end to end, AdamW) for GPT and T-TA, with attention.dense.EXPLICIT_BF16_MAX_KEYS at its value (written out) and
   at 0 (SDPA), alternating in one process so that the machine's drift hits both; then full 128- and 64-token rows
   of the `mini` preset on two threads, written out (up to 256 keys) against SDPA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import machine  # noqa: E402

import maskplay.nn.attention.dense as dense  # noqa: E402
from maskplay import preset  # noqa: E402
from maskplay.families import build_model  # noqa: E402
from maskplay.runtime.precision import forward_in  # noqa: E402


def sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def kernel_rows(rounds: int) -> list[dict]:
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        for length in (16, 32, 64, 128, 256):
            batch = 2048 // length
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(batch, 4, length, 64, generator=g).to(dtype).requires_grad_() for _ in range(3))
            lengths = torch.randint(length // 2, length + 1, (batch,), generator=g)
            keep = torch.arange(length)[None] < lengths[:, None]
            mask = (torch.ones(length, length, dtype=torch.bool).tril()[None] & keep[:, None, :])[:, None]
            times = {"sdpa": [], "written_out": []}
            for r in range(rounds):
                for name, fn in (("sdpa", sdpa), ("written_out", dense.written_out))[::1 if r % 2 else -1]:
                    fn(q, k, v, mask).float().sum().backward()
                    start = time.perf_counter()
                    for _ in range(5):
                        fn(q, k, v, mask).float().sum().backward()
                    times[name].append((time.perf_counter() - start) / 5)
            s, w = statistics.median(times["sdpa"]), statistics.median(times["written_out"])
            rows.append({"dtype": str(dtype).removeprefix("torch."), "length": length, "batch": batch,
                         "sdpa_ms": 1000 * s, "written_out_ms": 1000 * w, "sdpa_over_written_out": s / w})
            print(f"kernel {rows[-1]['dtype']:>8} L={length:<4} sdpa {1000 * s:7.2f} ms  written out {1000 * w:7.2f} ms"
                  f"  -> {s / w:.2f}x", flush=True)
    return rows


TWO_HOUR = {"num_layers": 4, "norm_placement": "pre", "ffn": "swiglu", "positions": "rotary", "hidden_dropout": 0.0,
            "attention_dropout": 0.0}


def training_step(family: str, rows: int = 64, length: int = 32, two_hour: bool = True):
    """One bf16 training step (AdamW) as a call: the two-hour model's shape on sentence rows of 12-32 tokens, or
    the `mini` preset on full rows."""
    torch.manual_seed(0)
    cfg = preset("mini", family=family, **(TWO_HOUR if two_hour else {}))
    model = build_model(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(7, cfg.vocab_size, (rows, length), generator=g)
    mask = torch.arange(length)[None] < torch.randint(12, 33, (rows,), generator=g)[:, None] if two_hour else \
        torch.ones(rows, length, dtype=torch.bool)

    def step() -> None:
        loss = forward_in(model, "bf16", **model.training_batch(ids, mask, generator=g)).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def step_rows(rounds: int, cases: tuple = (("gpt", 64, 32, True), ("tta", 64, 32, True)),
              keys: int | None = None) -> list[dict]:
    """Each case's step with attention written out up to `keys` (default: the switch's value) and with SDPA."""
    rows, default = [], dense.EXPLICIT_BF16_MAX_KEYS
    keys = default if keys is None else keys
    for family, n, length, two_hour in cases:
        step = training_step(family, n, length, two_hour)
        times = {keys: [], 0: []}
        for r in range(rounds):
            for threshold in ((keys, 0) if r % 2 else (0, keys)):
                dense.EXPLICIT_BF16_MAX_KEYS = threshold
                step()
                start = time.perf_counter()
                for _ in range(3):
                    step()
                times[threshold].append((time.perf_counter() - start) / 3)
        dense.EXPLICIT_BF16_MAX_KEYS = default
        w, s = statistics.median(times[keys]), statistics.median(times[0])
        shape = f"{'two-hour' if two_hour else 'mini'} {n} x {length}"
        rows.append({"family": family, "shape": shape, "threads": torch.get_num_threads(), "written_out_ms": 1000 * w,
                     "sdpa_ms": 1000 * s, "speedup": s / w})
        print(f"step   {family:>8} {shape} ({torch.get_num_threads()} threads): written out {1000 * w:7.1f} ms  "
              f"sdpa {1000 * s:7.1f} ms  -> {s / w:.3f}x", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine())
    result = {"machine": machine(), "threads": args.threads, "rounds": args.rounds, "kernel": kernel_rows(args.rounds),
              "step": step_rows(args.rounds)}
    # full rows of the mini preset on two threads, written out even where the switch stops (256 keys): why it stops
    torch.set_num_threads(2)
    result["full_rows_two_threads"] = step_rows(args.rounds, (("gpt", 16, 128, False), ("xlnet", 16, 128, False),
                                                              ("gpt", 32, 64, False), ("tta", 32, 64, False)), keys=256)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
