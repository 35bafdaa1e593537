"""int8 at the row counts of a decoding step (1-64 rows, one per sequence): one layer of the mini GPT's shape and its
vocabulary projection, fp32 and bf16 nn.Linear against maskplay's Int8Linear (what `--precision int8` runs: FBGEMM's
fused dynamic linear up to quant.FEW_ROWS rows), its oneDNN path forced (quantise, then oneDNN's int8 kernel: what
it ran at every row count before), and torch.ao's dynamic int8 (HuggingFace's int8 route); interleaved, medians.
Few rows are bound by the operations dispatched, not by arithmetic: the number to read is microseconds a call.

    python benchmarks/probes/int8_few_rows.py                 # results/probes/int8-few-rows/
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import interleaved, machine  # noqa: E402

from maskplay.runtime import quant  # noqa: E402


def forced_onednn(layer: quant.Int8Linear, x: torch.Tensor) -> torch.Tensor:
    """The layer with its few-rows path off: what every call ran before it existed."""
    few, quant.FEW_ROWS = quant.FEW_ROWS, 0
    try:
        return layer(x)
    finally:
        quant.FEW_ROWS = few


def cases(linear: nn.Module, bf16: nn.Module, ours: quant.Int8Linear, dynamic: nn.Module,
          x: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    xb = x.bfloat16()
    return {"fp32": lambda: linear(x), "bf16": lambda: bf16(xb), "int8": lambda: ours(x),
            "oneDNN": lambda: forced_onednn(ours, x), "torch.ao": lambda: dynamic(x)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = parser.parse_args()
    lines = [machine(), f"median of {args.rounds} interleaved rounds; microseconds a call",
             f"{'shape (out x in)':<18}{'rows':>5} {'fp32':>8} {'bf16':>8} {'int8':>8} {'oneDNN':>8} {'torch.ao':>9}"]
    for out_features, in_features in ((1024, 256), (16384, 256)):  # the FFN's up projection; the vocabulary
        torch.manual_seed(0)
        linear = nn.Linear(in_features, out_features)
        bf16 = nn.Linear(in_features, out_features).to(torch.bfloat16)
        ours = quant.Int8Linear.from_linear(linear)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic

            dynamic = quantize_dynamic(nn.Sequential(linear), {nn.Linear}, dtype=torch.qint8)
        for rows in args.rows:
            with torch.inference_mode():
                seconds = interleaved(cases(linear, bf16, ours, dynamic, torch.randn(rows, in_features)),
                                      rounds=args.rounds)
            lines.append(f"{f'{out_features} x {in_features}':<18}{rows:>5} "
                         + " ".join(f"{seconds[k] * 1e6:>8.0f}" for k in ("fp32", "bf16", "int8", "oneDNN"))
                         + f" {seconds['torch.ao'] * 1e6:>9.0f}")
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
