"""Attention masks as small composable functions. Convention: True = may attend.

A mask function has the signature of FlexAttention's ``mask_mod``: ``(b, h, q_idx, kv_idx) -> bool``.
Here the indices arrive as broadcastable integer tensors, so one call materialises the whole
``(B, 1, Lq, Lk)`` boolean mask for ``scaled_dot_product_attention``. Structural masks (what a family
may see) and the padding mask are separate functions, combined with ``and_masks`` at the attention call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def and_masks(*mods: MaskMod) -> MaskMod:
    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        out = mods[0](b, h, q, kv)
        for m in mods[1:]:
            out = out & m(b, h, q, kv)
        return out

    return mod


def or_masks(*mods: MaskMod) -> MaskMod:
    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        out = mods[0](b, h, q, kv)
        for m in mods[1:]:
            out = out | m(b, h, q, kv)
        return out

    return mod


def bidirectional() -> MaskMod:
    """Every query sees every key (BERT, ELECTRA)."""
    return lambda b, h, q, kv: torch.ones_like(q - kv, dtype=torch.bool)


def causal() -> MaskMod:
    """Query i sees keys j <= i (GPT)."""
    return lambda b, h, q, kv: kv <= q


def no_diagonal() -> MaskMod:
    """Query i sees every key except itself (T-TA): output i never depends on token i."""
    return lambda b, h, q, kv: q != kv


def padding(attention_mask: Tensor) -> MaskMod:
    """Keys at padding positions (attention_mask == 0) are hidden. attention_mask: (B, L)."""
    keep = attention_mask.bool()
    return lambda b, h, q, kv: keep[b, kv]


def prefix_lm(segment_ids: Tensor) -> MaskMod:
    """UniLM seq2seq: source (segment 0) sees the whole source; target (segment 1) sees the source and the
    target up to itself. segment_ids: (B, L)."""
    seg = segment_ids.long()
    return lambda b, h, q, kv: (seg[b, kv] == 0) | ((seg[b, q] == 1) & (kv <= q))


def permutation_content(rank: Tensor) -> MaskMod:
    """XLNet content stream: position i sees j when j comes no later than i in the factorization order.
    rank: (B, L), rank[b, i] = step at which token i is predicted."""
    return lambda b, h, q, kv: rank[b, kv] <= rank[b, q]


def permutation_query(rank: Tensor) -> MaskMod:
    """XLNet query stream: position i sees j only when j comes strictly earlier in the order."""
    return lambda b, h, q, kv: rank[b, kv] < rank[b, q]


def materialize(mod: MaskMod, batch: int, q_len: int, kv_len: int | None = None,
                device: torch.device | str | None = None) -> Tensor:
    """Evaluate `mod` on every (b, q, kv) triple: a (batch, 1, q_len, kv_len) bool tensor."""
    kv_len = q_len if kv_len is None else kv_len
    b = torch.arange(batch, device=device).view(batch, 1, 1, 1)
    h = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device)
    q = torch.arange(q_len, device=device).view(1, 1, q_len, 1)
    kv = torch.arange(kv_len, device=device).view(1, 1, 1, kv_len)
    return mod(b, h, q, kv).expand(batch, 1, q_len, kv_len)


def random_rank(lengths: Tensor, max_len: int, generator: torch.Generator | None = None) -> Tensor:
    """A random factorization order per sequence, as ranks; padding positions get the largest ranks."""
    batch = lengths.shape[0]
    noise = torch.rand(batch, max_len, generator=generator)
    noise = noise.masked_fill(torch.arange(max_len)[None, :] >= lengths[:, None], 2.0)
    return noise.argsort(dim=1).argsort(dim=1)


def family_mask(family: str, attention_mask: Tensor, segment_ids: Tensor | None = None,
                rank: Tensor | None = None) -> MaskMod:
    """The structural mask of a family AND the padding mask, as used at the attention call."""
    structural: dict[str, Callable[[], MaskMod]] = {
        "bert": bidirectional,
        "electra": bidirectional,
        "gpt": causal,
        "tta": no_diagonal,
        "unilm": lambda: prefix_lm(_required(segment_ids, "segment_ids", family)),
        "xlnet-content": lambda: permutation_content(_required(rank, "rank", family)),
        "xlnet-query": lambda: permutation_query(_required(rank, "rank", family)),
    }
    if family not in structural:
        raise ValueError(f"unknown mask family {family!r}; choose one of {sorted(structural)}")
    return and_masks(structural[family](), padding(attention_mask))


MASK_FAMILIES = ("bert", "gpt", "tta", "unilm", "xlnet-content", "xlnet-query", "electra")


def _required(value: Tensor | None, name: str, family: str) -> Tensor:
    if value is None:
        raise ValueError(f"the {family} mask needs {name}")
    return value
