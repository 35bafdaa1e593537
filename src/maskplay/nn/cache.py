"""A key/value cache for incremental decoding: every layer's keys and values of the positions computed so far,
so that a new token costs one position's work instead of a forward pass over the whole sequence.

The cache also holds what the attention mask and the position embeddings of later tokens need: which cached
columns are real tokens (`key_mask`; padding and finished rows leave holes) and each row's next absolute
position. Columns are shared by the batch: every row gets one new column per step, a real token or a hole.

    cache = KVCache(num_layers)
    positions, mask = cache.extend(new_mask)        # reserve the new tokens' columns; (B, T), (B, 1, T, L + T)
    h, _ = encoder(embed(ids, positions), mask, mode=Cached(cache))   # each layer appends its keys/values
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

    # a static cache (StaticKVCache): a step over it must not wait for the device (no checks of values, no branch on
    # them), so that it can be captured as a CUDA graph; whoever fills it checks the inputs once
    static = False

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

    def position_columns(self) -> tuple[Tensor, Tensor]:
        """The absolute positions of the tokens being added (B, T) and of every column they attend over (B, L + T),
        for the position terms that act inside attention (backbone.Encoder)."""
        keys = self.key_positions[:, :self.length]
        return keys[:, self.start:], keys

    def check_positions(self, max_position: int) -> None:
        """A ValueError once a row's tokens pass the model's `max_position` positions."""
        if int(self.next_position.max()) > max_position:
            raise ValueError(f"generation reached the model's {max_position} positions; shorten the prompt or "
                             "max_new_tokens")

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


class StaticKVCache(KVCache):
    """A KVCache of fixed capacity whose tensors keep their storage from step to step: one new token per row per
    step, written at a cursor that is itself a tensor. Shapes and addresses never change, so a decode step over
    it can be compiled once (torch.compile) or captured once and replayed (a CUDA graph); the attention mask
    covers every column, those not yet written masked off (which changes no attention weight). Beam search's
    reorder is not supported (generation uses the growing KVCache there).

    `load(cache)` fills it from a prefilled KVCache of the same batch, in place (a cache is reused across calls
    of the same shape, so a captured graph keeps reading the same tensors)."""

    static = True

    def __init__(self, num_layers: int, batch_size: int, capacity: int, device: torch.device | str = "cpu") -> None:
        super().__init__(num_layers, capacity)
        self.key_mask = torch.zeros(batch_size, capacity, dtype=torch.bool, device=device)
        self.key_positions = torch.zeros(batch_size, capacity, dtype=torch.long, device=device)
        self.next_position = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.query_columns = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.cursor = torch.zeros(1, dtype=torch.long, device=device)  # the next column to write
        self.at = torch.zeros(1, dtype=torch.long, device=device)  # the column this step writes
        self.start, self.length = capacity - 1, capacity

    def load(self, cache: KVCache) -> None:
        """Copy a prefilled cache (its `length` columns, the same batch size) into this one's buffers."""
        n = cache.length
        if cache.batch_size != self.batch_size or n >= self.capacity or cache.extras:
            raise ValueError(f"a static cache of {self.batch_size} rows x {self.capacity} columns cannot take a "
                             f"cache of {cache.batch_size} rows x {n} columns" + (" with extras" if cache.extras else ""))
        if not bool(cache.key_mask[:, :n].any(1).all()):  # so that no step meets a row with nothing to attend to
            raise ValueError("every row of a static cache needs a real cached token (an empty prompt has none)")
        for index in range(self.num_layers):
            k, v = cache.keys[index], cache.values[index]
            if k is None:
                raise ValueError(f"layer {index} has nothing cached")
            if self.keys[index] is None or self.keys[index].dtype != k.dtype:
                self.keys[index] = k.new_zeros(*k.shape[:2], self.capacity, k.shape[-1])
                self.values[index] = v.new_zeros(*v.shape[:2], self.capacity, v.shape[-1])
            self.keys[index][:, :, :n].copy_(k[:, :, :n])
            self.values[index][:, :, :n].copy_(v[:, :, :n])
        self.key_mask.zero_()
        self.key_mask[:, :n].copy_(cache.key_mask[:, :n])
        self.key_positions.zero_()
        self.key_positions[:, :n].copy_(cache.key_positions[:, :n])
        self.next_position.copy_(cache.next_position)
        self.cursor.fill_(n)

    def extend(self, new_mask: Tensor, within: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One new token per row (new_mask (B, 1)); its position (B, 1) and the mask over every column (B, 1, 1,
        capacity). In-place updates only, no host sync."""
        if new_mask.shape != (self.batch_size, 1):
            raise ValueError(f"a static cache takes one new token per row, ({self.batch_size}, 1); got "
                             f"{tuple(new_mask.shape)}")
        new = new_mask.bool()
        self.at.copy_(self.cursor)
        self.cursor.add_(1)
        self.key_mask.index_copy_(1, self.at, new)
        self.query_columns.copy_(self.next_position[:, None].masked_fill(~new, 0))
        self.key_positions.index_copy_(1, self.at, self.query_columns)
        self.next_position.add_(new[:, 0].long())
        return self.query_columns, self.key_mask[:, None, None, :]

    def append(self, index: int, k: Tensor | None, v: Tensor) -> tuple[Tensor, Tensor]:
        if k is None:
            k = v[..., :0]
        if self.keys[index] is None:
            raise ValueError("load(cache) a prefilled cache into a static cache before a step")
        self.keys[index].index_copy_(2, self.at, k)
        self.values[index].index_copy_(2, self.at, v)
        return self.keys[index], self.values[index]

    def position_columns(self) -> tuple[Tensor, Tensor]:
        return self.query_columns, self.key_positions

    def check_positions(self, max_position: int) -> None:
        """Checked once, by whoever sizes the cache (a check per step would be a host sync)."""

    def reorder(self, index: Tensor) -> None:
        raise NotImplementedError("a static cache is not reordered (beam search uses KVCache)")

    def _grow(self, needed: int) -> None:
        if needed > self.capacity:
            raise ValueError(f"the static cache holds {self.capacity} columns; {needed} needed")
