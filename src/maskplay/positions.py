"""Where a model's positions come from. One piece every family can take, chosen by `ModelConfig.positions`:

- "learned": a learned absolute table added to the token embeddings (BERT, T-TA, GPT; backbone.Embeddings).
- "transformer-xl": no absolute positions at all; every attention layer adds a term that depends on the
  distance between query and key (Dai et al. 2019, the scheme XLNet uses), through a fixed sinusoid of the
  distance that the layer projects with its own weights, and two learned biases per layer, u (content) and
  v (position):  score(i, j) = (q_i + u) . k_j + (q_i + v) . W_r R(pos_i - pos_j)  [+ segment term].

A scheme that acts inside attention gets, besides q and k, a `Frame`: everything about positions that is the
same in every layer of one forward pass (the sinusoid table, which row of it each query/key pair reads,
which pairs are in different segments), built once per batch like the mask. Attention then runs as SDPA with
the position term as an additive float mask (scaled like the scores), so it keeps SDPA's fused kernel."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig


def sinusoid(distances: Tensor, width: int) -> Tensor:
    """Transformer-XL's encoding of each distance, (R,) -> (R, width): [sin(d w_k), cos(d w_k)] with
    w_k = 1 / 10000^(2k / width), as the XLNet code builds it (all sines first, then all cosines)."""
    inv_freq = 1.0 / torch.pow(10000.0, torch.arange(0, width, 2, device=distances.device).float() / width)
    angles = distances.float()[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


@dataclass
class Frame:
    """Positions for one forward pass. `table` (R, H): the sinusoid of every distance from `largest` down;
    `index` (B or 1, 1, Lq, Lk): for each query/key pair, the table row of its distance; `segments_differ`
    (B, 1, Lq, Lk) bool or None: True where query and key are in different segments."""

    table: Tensor
    index: Tensor
    segments_differ: Tensor | None = None

    def rows(self, rows: Tensor) -> Frame:
        """The frame of a subset of query rows, `rows` (B, T) query indices into this frame's Lq (the query stream
        reads the rows of its target positions)."""
        B, T = rows.shape
        index = self.index.expand(B, -1, -1, -1)
        gather = rows[:, None, :, None].expand(B, 1, T, index.shape[-1])
        differ = None
        if self.segments_differ is not None:
            differ = self.segments_differ.expand(B, -1, -1, -1).gather(2, gather)
        return Frame(self.table, index.gather(2, gather), differ)


def relative_frame(query_positions: Tensor, key_positions: Tensor, width: int, clamp: int = -1,
                   query_segments: Tensor | None = None, key_segments: Tensor | None = None,
                   dropout: nn.Module | None = None) -> Frame:
    """The Transformer-XL frame. query_positions (Lq,) or (B, Lq), key_positions (Lk,) or (B, Lk): integer
    positions (memory keys sit before 0); distance = query position - key position, clamped to +-clamp when
    clamp > 0 (XLNet's clamp_len). Segments (B, Lq) / (B, Lk) give the relative segment term."""
    qp = query_positions if query_positions.dim() == 2 else query_positions[None]
    kp = key_positions if key_positions.dim() == 2 else key_positions[None]
    distance = qp[:, :, None] - kp[:, None, :]  # (B or 1, Lq, Lk)
    if clamp > 0:
        distance = distance.clamp(-clamp, clamp)
    largest, smallest = int(distance.max()), int(distance.min())
    table = sinusoid(torch.arange(largest, smallest - 1, -1, device=distance.device), width)
    if dropout is not None:
        table = dropout(table)
    differ = None
    if query_segments is not None and key_segments is not None:
        differ = (query_segments[:, :, None] != key_segments[:, None, :])[:, None]
    return Frame(table, (largest - distance)[:, None], differ)


class RelativePositions(nn.Module):
    """One layer's Transformer-XL position term (HuggingFace XLNet's r, r_w_bias, r_r_bias, r_s_bias and
    seg_embed). Its parameters are those of the layer that owns it."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        heads, size = config.num_heads, config.head_dim
        self.heads, self.size = heads, size
        self.project = nn.Linear(config.hidden_size, heads * size, bias=False)  # W_r
        self.content_bias = nn.Parameter(torch.zeros(heads, size))  # u
        self.position_bias = nn.Parameter(torch.zeros(heads, size))  # v
        self.segment_bias = nn.Parameter(torch.zeros(heads, size))
        self.segment_embed = nn.Parameter(torch.zeros(2, heads, size))  # same segment, different segment

    def reset_parameters(self, std: float) -> None:
        for p in (self.content_bias, self.position_bias, self.segment_bias, self.segment_embed):
            nn.init.normal_(p, std=std)

    def forward(self, q: Tensor, frame: Frame) -> tuple[Tensor, Tensor]:
        """q (B, heads, Lq, size), unscaled. Returns the queries to use against the content keys (q + u) and
        the additive score term (B, heads, Lq, Lk), already scaled by 1/sqrt(size) like SDPA's scores."""
        scale = self.size ** -0.5
        keys = self.project(frame.table.to(q.dtype)).view(-1, self.heads, self.size).transpose(0, 1)  # (h, R, s)
        by_distance = (q + self.position_bias[:, None].to(q.dtype)) @ keys.transpose(-1, -2)  # (B, h, Lq, R)
        B, h, Lq, _ = by_distance.shape
        index = frame.index.expand(B, h, Lq, -1)
        term = by_distance.gather(-1, index)
        if frame.segments_differ is not None:
            seg = (q + self.segment_bias[:, None].to(q.dtype)) @ self.segment_embed.to(q.dtype).permute(1, 2, 0)
            term = term + torch.where(frame.segments_differ, seg[..., 1:2], seg[..., 0:1])
        return q + self.content_bias[:, None].to(q.dtype), term * scale


def attend_with_term(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, term: Tensor, dropout_p: float = 0.0,
                     training: bool = False) -> Tensor:
    """SDPA with an additive score term (already scaled) and a boolean mask (True = may attend)."""
    bias = term.masked_fill(~mask, float("-inf"))
    if training and dropout_p > 0:
        from .dropout import dropout

        scores = (q @ k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5).add_(bias)
        return dropout(scores.softmax(dim=-1), dropout_p, True) @ v
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
