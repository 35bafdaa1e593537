"""Attention kinds other than plain dot-product heads, switched on by ModelConfig fields (docs/ARCHITECTURE.md).
Each runs the explicit softmax (SDPA has no hook between the scores and the softmax), and only when its switch
is on: the default attention stays SDPA's fused kernel.

- Talking-heads attention (Shazeer et al. 2020, "Talking-Heads Attention"; `talking_heads = true`): the heads'
  logits are mixed by a learned heads x heads matrix P_l before the softmax and the heads' weights by P_w after
  it, so every head's pattern can draw on every other's:
      J[h] = q_h k_h^T / sqrt(d);  L[g] = sum_h J[h] P_l[h, g] + mask;  W = softmax(L);  U[g] = sum_h W[h] P_w[h, g]
      out_g = U[g] v_g
  The family's mask (and a position bias: t5, alibi, Transformer-XL's term) is added after the logits' mixing,
  as the paper's masks are, so a forbidden key stays forbidden in every head. Both matrices start as the
  identity: a fresh model attends as plain attention and learns to mix."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .dropout import dropout


def _add_mask(scores: Tensor, mask: Tensor) -> Tensor:
    """scores + mask: -inf where a boolean mask is False, the float mask (a position bias, -inf included) added."""
    return scores.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else scores.add_(mask)


class TalkingHeads(nn.Module):
    """The two mixing matrices (heads, heads) and the attention that uses them."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.logits_mix = nn.Parameter(torch.eye(heads))  # P_l, applied before the softmax
        self.weights_mix = nn.Parameter(torch.eye(heads))  # P_w, applied after it

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float = 0.0,
                training: bool = False) -> Tensor:
        """q (B, h, Lq, dk), k (B, h, Lk, dk), v (B, h, Lk, dv); mask bool (True = may attend) or float (added),
        broadcastable to (B, h, Lq, Lk). Returns (B, h, Lq, dv)."""
        scores = (q @ k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5)
        mixed = torch.einsum("bhqk,hg->bgqk", scores, self.logits_mix.to(scores.dtype))
        weights = _add_mask(mixed, mask).softmax(dim=-1)
        weights = torch.einsum("bhqk,hg->bgqk", weights, self.weights_mix.to(weights.dtype))
        if training and dropout_p > 0:
            weights = dropout(weights, dropout_p, True)
        return weights @ v
