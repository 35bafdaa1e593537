"""Dropout whose random numbers cost little on a CPU.

torch's dropout draws one random number per element through bernoulli_, which on a 2-core CPU took as long
as the matmuls of a mini training step (13 % of it in a profile). Here the keep-mask comes from 64-bit random
words, each cut into four 16-bit uniforms: a quarter of the draws. The drop probability is rounded to a
multiple of 1/65536 (0.1 becomes 0.100006). The generator is torch's, so seeds and saved RNG states still
make runs repeatable."""

from __future__ import annotations

import torch
from torch import Tensor, nn

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def drop_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str | None = None) -> Tensor:
    """A bool tensor of `shape`, True with probability p (the elements to drop)."""
    n = 1
    for size in shape:
        n *= size
    words = torch.randint(_INT64_MIN, _INT64_MAX, ((n + 3) // 4,), dtype=torch.int64, device=device)
    uniform16 = words.view(torch.int16)[:n].view(shape)  # each int16 uniform over [-32768, 32767]
    return uniform16 < round(p * 65536) - 32768


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    return x.masked_fill(drop_mask(x.shape, p, x.device), 0.0).mul_(1.0 / (1.0 - p))


class Dropout(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
