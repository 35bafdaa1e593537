"""Packing: a padded batch's real tokens, on which every per-token layer runs at inference (backbone.Encoder), and
attention over them group by group on the padded layout."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..positions import PassPositions


class Packing:
    """The real tokens of a padded (B, L) batch. Everything in a block but attention works token by token, so
    it can run on the real tokens alone, (N, H) instead of (B, L, H): sorting by length leaves 16 % of the
    positions padding in batches of 32 WikiText sentences, and those would cost as much as real ones.

    Attention runs on the padded layout, in groups of GROUP rows each cut to its longest row when the batch
    is right-padded: a sorted batch of 32 sentences spans lengths 69 to 39, and attention's cost grows with the
    square of the padded length (a third of it is padding at 32 rows, a tenth at 8)."""

    GROUP = 8

    def __init__(self, tokens: Tensor) -> None:
        self.batch, self.length = tokens.shape
        flat = tokens.reshape(-1)
        self.index = flat.nonzero().squeeze(1)
        # for each padded position, the packed row attention reads there (padding reads row 0)
        source = (flat.long().cumsum(0) - 1).clamp_min(0).masked_fill_(~flat, 0).view(self.batch, self.length)
        lengths = tokens.sum(1)
        positions = torch.arange(self.length, device=tokens.device)
        if bool((tokens == (positions < lengths[:, None])).all()):
            rows = lengths.tolist()
            self.groups = [(start, min(start + self.GROUP, self.batch), max(rows[start:start + self.GROUP]))
                           for start in range(0, self.batch, self.GROUP)]
            self.groups = [group for group in self.groups if group[2] > 0]  # rows of padding only: no work
        else:
            self.groups = [(0, self.batch, self.length)]
        # each group's real tokens in its own (rows, end) grid, and the packed row each of its cells reads
        self.group_index = [tokens[a:b, :end].reshape(-1).nonzero().squeeze(1) for a, b, end in self.groups]
        self.group_source = [source[a:b, :end].reshape(-1) for a, b, end in self.groups]

    def pack(self, x: Tensor) -> Tensor:
        """(B, L, C) -> (N, C), the real tokens in row-major order."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self.index)

    def pad(self, x: Tensor) -> Tensor:
        """(N, C) -> (B, L, C), zeros at the padding: for outputs."""
        out = x.new_zeros(self.batch * self.length, x.shape[-1])
        return out.index_copy_(0, self.index, x).view(self.batch, self.length, -1)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dead_rows: Tensor | None, heads: int,
               positions: PassPositions | None = None, kernel: nn.Module | None = None) -> Tensor:
        """SDPA group by group, q, k and v packed (N, C); the real tokens' outputs, (N, H). A float mask (a
        position bias) is cut like a boolean one; positions (and rotary tables) by column, a group's columns being
        positions 0..end-1 as in the padded layout. `kernel`: an attention kind of variants.py instead of SDPA."""
        out = []
        for group, (a, b, end) in enumerate(self.groups):
            q_, k_, v_ = (None if x is None else self._cut(x, group, heads) for x in (q, k, v))
            cut = None if positions is None else positions.cut(end)
            if cut is not None and cut.rotary is not None:
                q_, k_ = cut.rotary.apply(q_, k_)
            if kernel is not None:
                o = kernel(q_, k_, v_, mask[a:b, :, :end, :end], positions=cut)
            else:
                o = F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask[a:b, :, :end, :end])
            if dead_rows is not None:
                o = o.masked_fill(dead_rows[a:b, :, :end], 0.0)
            out.append(o.transpose(1, 2).reshape((b - a) * end, -1).index_select(0, self.group_index[group]))
        return torch.cat(out) if len(out) > 1 else out[0]

    def _cut(self, x: Tensor, group: int, heads: int) -> Tensor:
        """(N, C) packed -> (rows, heads, end, C / heads): one group's cut of the padded layout, in one gather
        (the padding reads a real row, which no query may attend to as a key and whose output is dropped)."""
        a, b, end = self.groups[group]
        return x.index_select(0, self.group_source[group]).view(b - a, end, heads, -1).transpose(1, 2)
