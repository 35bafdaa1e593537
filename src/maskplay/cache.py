"""A key/value cache for incremental decoding: every layer's keys and values of the positions computed so far,
so that a new token costs one position's work instead of a forward pass over the whole sequence.

The cache also holds what the attention mask and the position embeddings of later tokens need: which cached
columns are real tokens (`key_mask`; padding and finished rows leave holes) and each row's next absolute
position. Columns are shared by the batch: every row gets one new column per step, a real token or a hole.

    cache = KVCache(num_layers)
    positions, mask = cache.extend(new_mask)        # reserve the new tokens' columns; (B, T), (B, 1, T, L + T)
    h, _ = encoder(embed(ids, positions), mask, cache=cache)   # each layer appends its keys/values
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values per layer as (B, heads, capacity, head_dim) buffers, filled up to `length` columns; the
    buffers grow by doubling (and `reserve` sizes them once when the final length is known), so appending a
    token copies nothing that is already cached.

    `extras` holds per-row state a family keeps between steps (batch first); `reorder` reorders it with the
    keys and values (beam search)."""

    def __init__(self, num_layers: int, capacity: int = 0) -> None:
        self.num_layers = num_layers
        self.keys: list[Tensor | None] = [None] * num_layers
        self.values: list[Tensor | None] = [None] * num_layers
        self.key_mask: Tensor | None = None  # (B, capacity) bool: True where a cached column is a real token
        self.next_position: Tensor | None = None  # (B,) long: the absolute position of each row's next token
        # (B, capacity) long: each cached column's absolute position (0 at the holes), for the position terms of
        # rotary, t5 and alibi (positions.PositionScheme), which relate a new query to every cached key
        self.key_positions: Tensor | None = None
        self.extras: dict[str, Tensor] = {}
        self.capacity = capacity
        self.start = 0  # first column of the tokens being added (set by extend)
        self.length = 0  # columns in use, the tokens being added included

    @property
    def batch_size(self) -> int:
        return 0 if self.key_mask is None else self.key_mask.shape[0]

    def extend(self, new_mask: Tensor, within: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Reserve columns for T new tokens, new_mask (B, T) bool marking the real ones; returns their absolute
        positions (B, T) (0 at the holes: always a valid index, and never read) and the attention mask (B, 1, T,
        L + T): new token i may attend to every real cached token and to the real new tokens j allowed by
        `within` ((T, T) or (B, 1, T, T) bool; default j <= i). The encoder's layers then fill the columns."""
        new_mask = new_mask.bool()
        B, T = new_mask.shape
        if self.key_mask is None:
            self.key_mask = torch.zeros(B, max(self.capacity, T), dtype=torch.bool, device=new_mask.device)
            self.next_position = torch.zeros(B, dtype=torch.long, device=new_mask.device)
            self.key_positions = torch.zeros(B, self.key_mask.shape[1], dtype=torch.long, device=new_mask.device)
            self.capacity = self.key_mask.shape[1]
        elif B != self.batch_size:
            raise ValueError(f"the cache holds {self.batch_size} rows, got new tokens for {B}")
        self._grow(self.length + T)
        self.start, self.length = self.length, self.length + T
        self.key_mask[:, self.start:self.length] = new_mask
        positions = (self.next_position[:, None] + new_mask.long().cumsum(1) - 1).masked_fill(~new_mask, 0)
        self.next_position = self.next_position + new_mask.long().sum(1)
        self.key_positions[:, self.start:self.length] = positions
        if within is None:
            within = torch.ones(T, T, dtype=torch.bool, device=new_mask.device).tril()
        new_keys = within & new_mask[:, None, None, :]
        cached_keys = self.key_mask[:, None, None, :self.start].expand(B, 1, T, self.start)
        return positions, torch.cat([cached_keys, new_keys.expand(B, 1, T, T)], dim=-1)

    def append(self, index: int, k: Tensor | None, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write layer `index`'s keys/values of the new tokens, (B, heads, T, head_dim), into the columns extend
        reserved; return all of that layer's keys/values, (B, heads, L + T, head_dim). The attention layer at that
        index calls it (attention.inputs.PassInputs.cache). k None: an attention kind without keys
        (attention.variants.Synthesizer), held as keys of width 0."""
        if k is None:
            k = v[..., :0]
        if k.shape[2] != self.length - self.start:
            raise ValueError(f"{k.shape[2]} new keys for {self.length - self.start} reserved columns: call "
                             "cache.extend(new_mask) before the forward pass")
        if self.keys[index] is None:
            B, heads, _, dim = k.shape
            self.keys[index] = k.new_empty(B, heads, self.capacity, dim)
            self.values[index] = v.new_empty(B, heads, self.capacity, v.shape[-1])
        keys, values = self.keys[index], self.values[index]
        keys[:, :, self.start:self.length] = k
        values[:, :, self.start:self.length] = v
        return keys[:, :, :self.length], values[:, :, :self.length]

    def reserve(self, tokens: int) -> None:
        """Room for `tokens` more columns without growing again."""
        self._grow(self.length + tokens)

    def reorder(self, index: Tensor) -> None:
        """Keep rows `index` (B',) of the batch, in that order (repeats allowed): beam search expands each
        input into its beams and then follows the beams it keeps."""
        pick = lambda x: x.index_select(0, index)  # noqa: E731
        self.keys = [None if k is None else pick(k) for k in self.keys]
        self.values = [None if v is None else pick(v) for v in self.values]
        if self.key_mask is not None:
            self.key_mask, self.next_position = pick(self.key_mask), pick(self.next_position)
            self.key_positions = pick(self.key_positions)
        self.extras = {name: pick(x) for name, x in self.extras.items()}

    def _grow(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        capacity = max(needed, 2 * self.capacity)

        def grown(x: Tensor | None, dim: int) -> Tensor | None:
            if x is None:
                return None
            shape = list(x.shape)
            shape[dim] = capacity - x.shape[dim]
            return torch.cat([x, x.new_zeros(shape)], dim=dim)

        self.key_mask = grown(self.key_mask, 1)
        self.key_positions = grown(self.key_positions, 1)
        self.keys = [grown(k, 2) for k in self.keys]
        self.values = [grown(v, 2) for v in self.values]
        self.capacity = capacity
