"""Attention kinds other than plain dot-product heads, switched on by ModelConfig fields (docs/guides/switches.md).
Each runs the explicit softmax (SDPA has no hook between the scores and the softmax), and only when its switch
is on: the default attention stays SDPA's fused kernel.

- Talking-heads attention (Shazeer et al. 2020, "Talking-Heads Attention"; `talking_heads = true`): the heads'
  logits are mixed by a learned heads x heads matrix P_l before the softmax and the heads' weights by P_w after
  it, so every head's pattern can draw on every other's:
      J[h] = q_h k_h^T / sqrt(d);  L[g] = sum_h J[h] P_l[h, g] + mask;  W = softmax(L);  U[g] = sum_h W[h] P_w[h, g]
      out_g = U[g] v_g
  The family's mask (and a position bias: t5, alibi, Transformer-XL's term) is added after the logits' mixing,
  as the paper's masks are, so a forbidden key stays forbidden in every head. Both matrices start as the
  identity: a fresh model attends as plain attention and learns to mix.
- Synthesizer-Random and Synthesizer-Dense (Tay et al. 2021; `attention = "synthesizer-random"` / `"...-dense"`):
  logits that are not q . k at all (Synthesizer below); the family's mask still applies."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...config import ModelConfig
from ..dropout import dropout
from ..positions import PassPositions


def _add_mask(scores: Tensor, mask: Tensor) -> Tensor:
    """scores + mask: -inf where a boolean mask is False, the float mask (a position bias, -inf included) added."""
    return scores.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else scores.add_(mask)


class TalkingHeads(nn.Module):
    """The two mixing matrices (heads, heads) and the attention that uses them."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.logits_mix = nn.Parameter(torch.eye(heads))  # P_l, applied before the softmax
        self.weights_mix = nn.Parameter(torch.eye(heads))  # P_w, applied after it

    def no_weight_decay(self) -> list[nn.Parameter]:
        """Identity-initialised: weight decay would pull the mixing towards zero, not towards no mixing."""
        return [self.logits_mix, self.weights_mix]

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float = 0.0,
                training: bool = False, positions: PassPositions | None = None) -> Tensor:
        """q (B, h, Lq, dk), k (B, h, Lk, dk), v (B, h, Lk, dv); mask bool (True = may attend) or float (added),
        broadcastable to (B, h, Lq, Lk). Returns (B, h, Lq, dv)."""
        scores = (q @ k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5)
        mixed = torch.einsum("bhqk,hg->bgqk", scores, self.logits_mix.to(scores.dtype))
        weights = _add_mask(mixed, mask).softmax(dim=-1)
        weights = torch.einsum("bhqk,hg->bgqk", weights, self.weights_mix.to(weights.dtype))
        if training and dropout_p > 0:
            weights = dropout(weights, dropout_p, True)
        return weights @ v


# ---- Synthesizer ---------------------------------------------------------------------------------------------


class Synthesizer(nn.Module):
    """Synthesizer attention (Tay et al. 2021, "Synthesizer: Rethinking Self-Attention in Transformer Models"): the
    attention logits are synthesised instead of computed as q . k, then masked, softmaxed and applied to the
    values as usual (`attention = "synthesizer-random"` or `"synthesizer-dense"`).

    - Random: a learned (heads, l, l) table R, l = max_position: query position i's logit for key position j is
      R_h[i, j], whatever the tokens (the paper's trainable Random Synthesizer).
    - Dense: a two-layer network of the query's own hidden state, F(x_i) = W_2 relu(W_1 x_i + b_1) + b_2 with W_2
      giving heads x l logits, one per key position (W_1 shared by the heads, as the authors' code has it).

    Logits are read at the pass's query and key positions (positions.PassPositions), so packing, PLL's rows and
    the key/value cache (absolute positions of cached keys) read them where the plain forward pass does. The
    layer has no query or key projection."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.kind = config.attention
        self.heads, self.length = config.num_heads, config.max_position
        H = config.hidden_size
        if self.kind == "synthesizer-random":
            self.table = nn.Parameter(torch.randn(self.heads, self.length, self.length) * config.initializer_range)
            self.hidden = self.logits = None
        else:
            self.table = None
            self.hidden = nn.Linear(H, H)
            self.logits = nn.Linear(H, self.heads * self.length)

    def features(self, h: Tensor) -> Tensor | None:
        """Dense: F(h) (..., heads x l), laid out per head like a query projection; Random: None."""
        if self.hidden is None:
            return None
        return self.logits(F.relu(self.hidden(h)))

    def scores(self, q: Tensor | None, positions: PassPositions) -> Tensor:
        """The logits (B or 1, heads, Lq, Lk) at the pass's query and key positions; q (B, heads, Lq, l) or None."""
        if q is None:
            q = self.table[:, positions.query].transpose(0, 1)  # (Bq, heads, Lq, l): the query positions' rows
        keys = positions.key
        batch = max(q.shape[0], keys.shape[0])
        index = keys[:, None, None, :].expand(batch, q.shape[1], q.shape[2], -1)
        return q.expand(batch, -1, -1, -1).gather(-1, index)

    def forward(self, q: Tensor | None, k: Tensor | None, v: Tensor, mask: Tensor, dropout_p: float = 0.0,
                training: bool = False, positions: PassPositions | None = None) -> Tensor:
        if positions is None:
            raise ValueError("synthesizer attention reads its logits at the pass's positions: give a PassPositions")
        scores = self.scores(q, positions)
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        weights = scores.softmax(dim=-1)
        if training and dropout_p > 0:
            weights = dropout(weights, dropout_p, True)
        return weights @ v
