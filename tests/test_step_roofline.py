"""benchmarks/probes/step_roofline.py: each operator's FLOPs and bytes as the roofline estimate counts them, against sums
made by hand, and the extrapolation from two row counts to the recipe's batch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "probes"))
import step_roofline  # noqa: E402


def test_flops_and_bytes_of_a_product_an_in_place_update_and_a_view():
    a, b = torch.randn(4, 8), torch.randn(8, 16)
    with step_roofline.Roofline() as counter:
        c = a @ b                 # 2 x 4 x 8 x 16 FLOPs; reads 32 + 128 floats, writes 64
        c.add_(1.0)               # reads and writes c's 64 floats
        c.t()                     # a view: nothing moves
        a.expand(3, 4, 8).sum()   # reads a's 32 stored floats once, writes one
    ops = counter.ops
    assert ops["mm"] == {"calls": 1, "flops": 2 * 4 * 8 * 16, "bytes": (32 + 128 + 64) * 4}
    assert ops["add_"]["bytes"] == 2 * 64 * 4 and ops["add_"]["flops"] == 0
    assert "t" not in ops and "transpose" not in ops
    assert ops["sum"]["bytes"] == (32 + 1) * 4


def test_extrapolation_keeps_the_fixed_part_and_scales_the_rest():
    small = {"mm": {"calls": 3, "flops": 100.0 + 10 * 4, "bytes": 50.0 + 2 * 4}}  # fixed + per-row x 4 rows
    large = {"mm": {"calls": 3, "flops": 100.0 + 10 * 8, "bytes": 50.0 + 2 * 8}, "new": {"calls": 1, "flops": 0.0,
                                                                                        "bytes": 8.0}}
    out = step_roofline.extrapolate(small, large, (4, 8), 256)
    assert out["mm"] == {"flops": 100.0 + 10 * 256, "bytes": 50.0 + 2 * 256, "calls": 3}
    assert out["new"]["bytes"] == 8.0 + 8.0 * (256 - 8) / 4  # absent at 4 rows: all of it grows with the rows
    args = argparse.Namespace(flop_eff=1.0, byte_eff=1.0, min_kernel_us=0.0, no_overlap=False)
    (row, *_), = [step_roofline.estimate({"mm": {"calls": 1, "flops": 989e12, "bytes": 1.0}}, args)]
    assert row["bound"] == "compute" and abs(row["ms"] - 1000.0) < 1e-6  # a second of the peak's FLOPs
