"""Adaptive attention span (Sukhbaatar et al., ACL 2019): a learnable span z per head.

Each head h weights the key at distance x from the query by the soft mask

    m_z(x) = clamp((R + z_h - x) / R, 0, 1)

(1 up to distance z, a linear ramp of width R to 0 at z + R) and renormalises, as the paper does:

    a_ij = m_z(|i - j|) exp(s_ij) / sum_k m_z(|i - k|) exp(s_ik)

which is softmax(s_ij + log m_z(|i - j|)): the soft mask enters attention as an additive log-bias, so it runs
in SDPA as a float mask, and inside ``banded.sliding_window_attention`` with the window cut at the
largest span z + R (keys beyond it have weight 0), in memory linear in length. The paper's distance is
t - r over past tokens; maskplay's families also look ahead, so x = |i - j| (a causal family keeps its causal
mask as the hard mask). The loss adds ``penalty()`` (the L1 term, the mean span in tokens) times a
coefficient; ``spans()`` reports the learned spans.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..masks import MaskMod
from .banded import masked_attention, sliding_window_attention
from .long_masks import materialize_heads

__all__ = ["AdaptiveSpan"]


class AdaptiveSpan(nn.Module):
    """A learnable span per head. The parameter is the span as a fraction of `max_span` (as the official code
    keeps it, so one learning rate suits any max_span); call ``clamp_()`` after each optimizer step to keep it in
    [0, 1]."""

    def __init__(self, num_heads: int, max_span: int, ramp: int = 32, init_fraction: float = 0.0) -> None:
        super().__init__()
        if max_span < 1 or ramp < 1:
            raise ValueError(f"max_span and ramp must be >= 1, got {max_span}, {ramp}")
        if not 0.0 <= init_fraction <= 1.0:
            raise ValueError(f"init_fraction must lie in [0, 1], got {init_fraction}")
        self.num_heads, self.max_span, self.ramp = num_heads, max_span, ramp
        self.span_fraction = nn.Parameter(torch.full((num_heads,), float(init_fraction)))

    def no_weight_decay(self) -> list[nn.Parameter]:
        """The spans have their own L1 penalty (long_attention.span_penalty), not weight decay."""
        return [self.span_fraction]

    @property
    def z(self) -> Tensor:
        """(H,) spans in tokens."""
        return self.span_fraction * self.max_span

    def soft_mask(self, distance: Tensor) -> Tensor:
        """m_z(distance) per head: (H, *distance.shape), in [0, 1], in fp32 whatever the parameters' dtype (bf16
        holds integers exactly only up to 256)."""
        z = self.z.float().view(-1, *([1] * distance.dim()))
        return ((self.ramp + z - distance.float()) / self.ramp).clamp(0.0, 1.0)

    def bias_mod(self) -> MaskMod:
        """log m_z(|i - j|) as a score bias, -inf where the mask is 0. Its gradient reaches z inside the ramp and
        is 0 (not NaN: log is taken of a clamped value) outside it, also at a distance of exactly z + R, where
        m_z has a kink (there the multiplicative form's derivative is the one-sided one from above)."""

        def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
            z = self.z.float()[h]
            m = ((self.ramp + z - (q - kv).abs().float()) / self.ramp).clamp(0.0, 1.0)
            tiny = torch.finfo(m.dtype).tiny
            return torch.where(m > 0, m.clamp_min(tiny).log(), torch.full_like(m, float("-inf")))

        return mod

    def forward(self, weights: Tensor) -> Tensor:
        """Apply the span to attention probabilities (B, H, Lq, Lk), query i and key j at distance |i - j|,
        renormalised over each row (rows left with no weight stay zero)."""
        Lq, Lk = weights.shape[-2:]
        distance = (torch.arange(Lq, device=weights.device)[:, None] - torch.arange(Lk, device=weights.device)).abs()
        masked = weights * self.soft_mask(distance)
        total = masked.sum(dim=-1, keepdim=True)
        return masked / total.clamp_min(torch.finfo(masked.dtype).tiny)

    def window(self) -> int:
        """The largest distance any head can still see: keys further than this have weight 0 in every head."""
        return max(0, math.ceil(float(self.z.detach().max()) + self.ramp) - 1)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod | None = None, *, banded: bool = True,
                  chunk: int | None = None) -> Tensor:
        """Attention of q (B, H, L, D) over k, v under the span (and the hard mask `mask_mod`: family, padding).
        banded: the banded kernel over window() (memory linear in length); else dense SDPA with the float mask."""
        B, H, L, _ = q.shape
        if H != self.num_heads:
            raise ValueError(f"AdaptiveSpan has {self.num_heads} heads, the input {H}")
        if banded:
            return sliding_window_attention(q, k, v, self.window(), mask_mod, chunk=chunk, bias_mod=self.bias_mod())
        bias = materialize_heads(self.bias_mod(), B, H, L)
        if mask_mod is not None:
            hidden = ~materialize_heads(mask_mod, B, H, L)
            bias = bias.masked_fill(hidden, float("-inf"))
        return masked_attention(q, k, v, bias)

    def penalty(self) -> Tensor:
        """The L1 term of the paper's loss without its coefficient: the mean span over heads, in tokens."""
        return self.z.mean()

    @torch.no_grad()
    def clamp_(self) -> None:
        self.span_fraction.clamp_(0.0, 1.0)

    def spans(self) -> list[float]:
        """The learned span of each head, in tokens (z; the mask reaches 0 at z + ramp)."""
        return [round(float(z), 2) for z in self.z.detach()]
