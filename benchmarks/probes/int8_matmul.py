"""int8 against bf16 on this CPU for one FFN-sized product, (1024 x 512) @ (512 x 2048): fp32 and bf16
nn.Linear, torch.ao dynamic int8 quantisation, a bare int8 x int8 -> int32 torch._int_mm, and maskplay's
Int8Linear (what `--precision int8` uses: oneDNN's int8 kernel, dequantisation and bias fused), with and
without quantising its input (the kernel alone); interleaved.

    python benchmarks/probes/int8_matmul.py
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import interleaved, machine  # noqa: E402

from maskplay.runtime.quant import Int8Linear, quantize_activations  # noqa: E402


def main() -> None:
    m, k, n = 1024, 512, 2048
    torch.manual_seed(0)
    linear = nn.Linear(k, n)
    x = torch.randn(m, k)
    bf16, xb = nn.Linear(k, n).to(torch.bfloat16), x.bfloat16()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        dynamic = quantize_dynamic(nn.Sequential(nn.Linear(k, n)), {nn.Linear}, dtype=torch.qint8)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8)
    ours = Int8Linear.from_linear(linear)
    qx, scale, zero_point = quantize_activations(x)
    kernel_args = (ours._packed, ours.weight_scale, ours._zero_points, ours.bias, 1.0, 0, torch.float32, "none", [], "")
    with torch.inference_mode():
        cases = {"fp32 nn.Linear": lambda: linear(x), "bf16 nn.Linear": lambda: bf16(xb),
                 "torch.ao dynamic int8": lambda: dynamic(x), "torch._int_mm int8": lambda: torch._int_mm(a, b),
                 "maskplay Int8Linear": lambda: ours(x)}
        if ours._packed is not None:
            cases["its oneDNN kernel alone"] = lambda: torch.ops.onednn.qlinear_pointwise(qx, scale, zero_point,
                                                                                         *kernel_args)
        seconds = interleaved(cases, rounds=20)
    print(machine())
    print(f"({m} x {k}) @ ({k} x {n}), median of 20 interleaved rounds")
    for name, s in seconds.items():
        print(f"  {name:<26}{s * 1e3:>7.2f} ms {2 * m * k * n / s / 1e9:>7.0f} G(FL)OP/s")


if __name__ == "__main__":
    main()
