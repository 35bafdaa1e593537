"""Disentangled attention (`positions = "disentangled"`; docs/guides/switches.md), DeBERTa's (He et al. 2021) as GPT-BERT
has it (Charpentier & Samuel 2024): content-to-content, content-to-position and position-to-content scores, the
relative embeddings projected by the layer's own query and key projections (DeBERTa's share_att_key),

    score(i, j) = (q_i . k_j + q_i . K_r[b(i, j)] + k_j . Q_r[b(i, j)]) / sqrt(3 d),

with Q_r = query(R), K_r = key(R) for the pass's relative table R (positions.Disentangled, after its LayerNorm and,
while training, the attention dropout), b(i, j) the row of the log bucket of the distance pos_i - pos_j, and d the
query/key width per head. The position terms are an additive bias on SDPA's scores (`scale` = 1 / sqrt(3 d)), cut by
the family's mask like any other score: so every mask (T-TA's keys/values from the other stream included), packed
inference, PLL's last-layer rows and the key/value cache (the cached keys' own absolute positions) work unchanged."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ..dropout import dropout
from ..positions import PassPositions
from . import flex
from .dense import Attention, split_heads
from .inputs import PassInputs

# How DisentangledScores.bias reads each pair's table row: "gather" (torch.gather, whose backward is an atomic
# scatter-add on a GPU) or "one-hot" (batched matrix products with the pairs' one-hot rows: no atomics, more FLOPs,
# slower on a CPU; only for an index shared by the batch). Not a model switch (the values are the same): a choice of
# kernel that benchmarks/probes/gpu_profile_step.py --bias compares on a GPU. With run.flex_attention (attention/flex.py)
# there is no bias: FlexAttention reads each pair's terms inside its kernel (position_terms).
BIAS_KERNELS = ("gather", "one-hot")
bias_kernel = "gather"


def position_terms(c2p: Tensor, p2c: Tensor, index: Tensor, scale: float) -> flex.ScoreMod:
    """FlexAttention's score_mod: score(i, j) + scale (c2p[i, index(i, j)] + p2c[j, index(i, j)]); c2p (B, h, Lq,
    R), p2c (B, h, Lk, R), index (1 or B, Lq, Lk). The terms in fp32, as the scores they join: their gradients are
    atomic adds inside the kernel's backward, which bf16 would round at every add."""
    c2p, p2c, shared = c2p.float(), p2c.float(), index.shape[0] == 1

    def score_mod(score: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        r = index[0, i, j] if shared else index[b, i, j]
        return score + (c2p[b, h, i, r] + p2c[b, h, j, r]) * scale

    return score_mod


class DisentangledScores:
    """One layer's scores for one pass, from its projected relative tables `pos_q`, `pos_k` (R, heads x d); called
    as an attention kernel, `(q, k, v, mask, dropout_p, training, positions)` -> (B, heads, Lq, dv), with q, k, v
    split into heads and `mask` boolean (True = may attend)."""

    def __init__(self, pos_q: Tensor, pos_k: Tensor, heads: int) -> None:
        self.pos_q = pos_q.view(pos_q.shape[0], heads, -1).transpose(0, 1)  # (heads, R, d)
        self.pos_k = pos_k.view(pos_k.shape[0], heads, -1).transpose(0, 1)

    def tables(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """c2p (B, h, Lq, R): q_i . K_r[r] for every table row r, and p2c (B, h, Lk, R): k_j . Q_r[r]."""
        return q @ self.pos_k.transpose(-1, -2), k @ self.pos_q.transpose(-1, -2)

    def bias(self, q: Tensor, k: Tensor, index: Tensor) -> Tensor:
        """The content-to-position plus position-to-content term, (B, heads, Lq, Lk), unscaled; index (1 or B, Lq,
        Lk) the table row of each pair."""
        c2p, p2c = self.tables(q, k)
        B, heads, Lq, R = c2p.shape
        if bias_kernel == "one-hot" and index.shape[0] == 1:
            Lk = k.shape[2]
            hot = F.one_hot(index[0], R).to(c2p.dtype)  # (Lq, Lk, R)
            # c2p: for each query i, (B h, R) @ (R, Lk); p2c: for each key j, (B h, R) @ (R, Lq)
            by_query = c2p.permute(2, 0, 1, 3).reshape(Lq, B * heads, R) @ hot.transpose(1, 2)
            by_key = p2c.permute(2, 0, 1, 3).reshape(Lk, B * heads, R) @ hot.permute(1, 2, 0)
            return (by_query.view(Lq, B, heads, Lk).permute(1, 2, 0, 3)
                    + by_key.view(Lk, B, heads, Lq).permute(1, 2, 3, 0))
        index = index[:, None].expand(B, heads, Lq, k.shape[2])
        return c2p.gather(-1, index) + p2c.gather(-1, index.transpose(-1, -2)).transpose(-1, -2)

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float = 0.0, training: bool = False,
                 positions: PassPositions | None = None) -> Tensor:
        if positions is None or positions.relative is None:
            raise ValueError("disentangled attention needs the pass's relative positions (PassPositions.relative)")
        scale = (3 * q.shape[-1]) ** -0.5
        if flex.enabled and not (training and dropout_p > 0):
            terms = position_terms(*self.tables(q, k), positions.relative.index, scale)
            return flex.attend(q, k, v, mask, terms, scale)
        bias = self.bias(q, k, positions.relative.index).mul_(scale).masked_fill_(~mask, float("-inf"))
        if training and dropout_p > 0:
            scores = (q @ k.transpose(-1, -2)).mul_(scale).add_(bias)
            return dropout(scores.softmax(dim=-1), dropout_p, True) @ v
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)


class DisentangledAttention(Attention):
    """dense.Attention with disentangled scores: the same projections (no new weights; the value gate and output
    norm as everywhere), the relative table read from `inputs.positions.relative`."""

    def forward(self, h: Tensor, inputs: PassInputs, index: int = 0) -> Tensor:
        positions = inputs.positions
        if positions is None or positions.relative is None:
            raise ValueError("disentangled attention needs the pass's relative positions (PassPositions.relative)")
        q, k, v = self.project(h, inputs, index)
        table = positions.relative.table.to(q.dtype)
        if self.training and self.dropout_p > 0:
            table = dropout(table, self.dropout_p, True)
        scores = DisentangledScores(self.query(table), self.key(table), self.num_heads)
        mask, dead_rows = inputs.mask, inputs.dead_rows
        if inputs.packing is not None:
            return self.output(inputs.packing.attend(q, k, v, mask, dead_rows, self.num_heads, positions, scores), h)
        B, Lq, _ = q.shape
        q, k, v = (split_heads(x, self.num_heads) for x in (q, k, v))
        if inputs.cache is not None:
            k, v = inputs.cache.append(index, k, v)
        a = scores(q, k, v, mask, self.dropout_p, self.training, positions)
        if dead_rows is not None:
            a = a.masked_fill(dead_rows, 0.0)
        return self.output(a.transpose(1, 2).reshape(B, Lq, -1), h)
