"""Long-text attention patterns as mask functions (Longformer, BigBird). Convention: True = may attend.

Each function returns a ``MaskMod`` (see ``maskplay.nn.masks``): ``(b, h, q_idx, kv_idx) -> bool`` on broadcastable
integer tensors, so the patterns compose with ``and_masks`` / ``or_masks``, with every family's structural mask
and with padding, and run unchanged as FlexAttention ``mask_mod``s (they only index captured tensors and do
elementwise arithmetic). A causal Longformer is ``and_masks(sliding_window(w), causal())``; T-TA under a window
is ``and_masks(sliding_window(w), no_diagonal(), padding(m))``.

``materialize_heads`` evaluates a pattern per head, for the patterns that differ between heads (a dilation per
head, BigBird's random blocks per head); ``maskplay.nn.masks.materialize`` evaluates head 0 only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..masks import MaskMod, or_masks

__all__ = ["sliding_window", "dilated_sliding_window", "global_tokens", "global_flags", "block_window",
           "random_blocks", "bigbird", "materialize_heads"]


def sliding_window(window: int) -> MaskMod:
    """Longformer's sliding window: query i sees keys j with |i - j| <= window (`window` keys on each side, so
    Longformer's "window size" is 2 * window + 1 counting the token itself)."""
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    return lambda b, h, q, kv: (q - kv).abs() <= window


def dilated_sliding_window(window: int, dilation: int | Sequence[int]) -> MaskMod:
    """Longformer's dilated window: query i sees i + k * d for |k| <= window, so the receptive field is
    window * d on each side with gaps of d - 1. `dilation` is one d for every head or one per head (Longformer
    dilates some heads and not others); with a sequence, head h uses dilation[h]."""
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    if isinstance(dilation, int):
        if dilation < 1:
            raise ValueError(f"dilation must be >= 1, got {dilation}")
        return lambda b, h, q, kv: ((q - kv).abs() <= window * dilation) & ((q - kv) % dilation == 0)
    per_head = torch.as_tensor(list(dilation), dtype=torch.long)
    if per_head.numel() == 0 or bool((per_head < 1).any()):
        raise ValueError(f"every dilation must be >= 1, got {list(dilation)}")

    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        d = per_head.to(q.device)[h]
        return ((q - kv).abs() <= window * d) & ((q - kv) % d == 0)

    return mod


def global_flags(positions: Tensor, seq_len: int) -> Tensor:
    """(B, L) bool "is global" from either form: a (B, L) bool tensor (returned as is) or (B, G) integer
    positions, -1 meaning "none" (rows with fewer global tokens than G)."""
    if positions.dtype == torch.bool:
        if positions.dim() != 2 or positions.shape[1] != seq_len:
            raise ValueError(f"a bool global mask must be (B, {seq_len}), got {tuple(positions.shape)}")
        return positions
    if positions.dim() != 2:
        raise ValueError(f"global positions must be (B, G), got {tuple(positions.shape)}")
    positions = positions.long()
    if bool(((positions < -1) | (positions >= seq_len)).any()):
        raise ValueError(f"global positions must lie in [0, {seq_len}) or be -1 (none)")
    flags = torch.zeros(positions.shape[0], seq_len + 1, dtype=torch.bool, device=positions.device)
    # -1 lands in the spare last column, which is dropped
    flags.scatter_(1, positions.masked_fill(positions < 0, seq_len), True)
    return flags[:, :seq_len]


def global_tokens(positions: Tensor, seq_len: int | None = None) -> MaskMod:
    """Longformer's global attention: a global token sees every key and every query sees it. `positions`: a
    (B, L) bool tensor, or (B, G) integer positions per row with -1 for "none" (then `seq_len` is needed).
    Alone it allows only the global rows and columns: combine it with a window by ``or_masks``."""
    if positions.dtype != torch.bool and seq_len is None:
        raise ValueError("global_tokens needs seq_len when positions are given as (B, G) indices")
    flags = global_flags(positions, positions.shape[1] if seq_len is None else seq_len)
    return lambda b, h, q, kv: flags[b, q] | flags[b, kv]


def block_window(block_size: int, radius: int = 1) -> MaskMod:
    """BigBird's window, in blocks: the query block qb sees the key blocks qb - radius .. qb + radius."""
    if block_size < 1 or radius < 0:
        raise ValueError(f"block_size must be >= 1 and radius >= 0, got {block_size}, {radius}")
    return lambda b, h, q, kv: (q // block_size - kv // block_size).abs() <= radius


def random_block_table(seq_len: int, block_size: int, num_random: int, heads: int = 1, radius: int = 1,
                       generator: torch.Generator | None = None) -> Tensor:
    """(heads, nb, nb) bool, nb = ceil(seq_len / block_size): each query block's `num_random` key blocks, drawn
    without replacement from the blocks outside its window (|qb - kb| > radius; BigBird spends its random
    budget where the window does not already look), fewer where fewer such blocks exist. Drawn with
    `generator`, so one seed gives one pattern."""
    nb = -(-seq_len // block_size)
    qb = torch.arange(nb)
    outside = (qb[:, None] - qb[None, :]).abs() > radius  # (nb, nb)
    noise = torch.rand(heads, nb, nb, generator=generator)
    # inside-window blocks sort last: the first num_random of each row's order are random outside blocks
    noise = noise.masked_fill(~outside, 2.0)
    order = noise.argsort(dim=-1)
    take = min(num_random, nb)
    table = torch.zeros(heads, nb, nb, dtype=torch.bool)
    table.scatter_(-1, order[..., :take], True)
    return table & outside


def random_blocks(table: Tensor, block_size: int) -> MaskMod:
    """The random part of BigBird from a (heads, nb, nb) block table (see random_block_table): query i sees key
    j when table[h, i // block_size, j // block_size]; a one-head table serves every head."""
    heads = table.shape[0]

    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        t = table.to(q.device)
        return t[h % heads, q // block_size, kv // block_size]

    return mod


def bigbird(seq_len: int, block_size: int, num_random: int, global_positions: Tensor | None = None,
            radius: int = 1, heads: int = 1, generator: torch.Generator | None = None) -> MaskMod:
    """BigBird (ITC): block window (radius blocks on each side) OR global tokens OR `num_random` random key
    blocks per query block (per head when heads > 1). The random blocks come from `generator`: seed it for a
    reproducible pattern. Compose with the family mask and padding by ``and_masks``."""
    parts = [block_window(block_size, radius),
             random_blocks(random_block_table(seq_len, block_size, num_random, heads, radius, generator), block_size)]
    if global_positions is not None:
        parts.append(global_tokens(global_positions, seq_len))
    return or_masks(*parts)


def materialize_heads(mod: MaskMod, batch: int, heads: int, q_len: int, kv_len: int | None = None,
                      device: torch.device | str | None = None) -> Tensor:
    """Evaluate `mod` on every (b, h, q, kv): a (batch, heads, q_len, kv_len) bool tensor."""
    kv_len = q_len if kv_len is None else kv_len
    b = torch.arange(batch, device=device).view(batch, 1, 1, 1)
    h = torch.arange(heads, device=device).view(1, heads, 1, 1)
    q = torch.arange(q_len, device=device).view(1, 1, q_len, 1)
    kv = torch.arange(kv_len, device=device).view(1, 1, 1, kv_len)
    return mod(b, h, q, kv).expand(batch, heads, q_len, kv_len)
