"""Attention masks as small composable functions. Convention: True = may attend.

A mask function has the signature of FlexAttention's ``mask_mod``: ``(b, h, q_idx, kv_idx) -> bool``.
Here the indices arrive as broadcastable integer tensors, so one call materialises the whole
``(B, 1, Lq, Lk)`` boolean mask for ``scaled_dot_product_attention``. Structural masks (what a family
may see) and the padding mask are separate functions, combined with ``and_masks`` at the attention call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor

from ..registry import registered

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


def _every_key(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    return torch.ones_like(q - kv, dtype=torch.bool)


def _left_to_right(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    return kv <= q


def bidirectional() -> MaskMod:
    """Every query sees every key (BERT, ELECTRA). One function object, so that sdpa_kind recognises it."""
    return _every_key


def causal() -> MaskMod:
    """Query i sees keys j <= i (GPT). One function object, so that sdpa_kind recognises it."""
    return _left_to_right


class _Known:
    """What the caller has checked of the passes' padding on the host (rows_without_padding)."""

    no_padding = False


@contextmanager
def rows_without_padding(known: bool) -> Iterator[None]:
    """Within, with `known`: every pass's attention_mask is all true, as the caller checked on the host's copy of
    the batch, so sdpa_kind decides without reading the mask from the device: no host synchronisation, and under
    torch.compile no graph break at that read (a module attribute is a guard, not a break; a batch with padding
    compiles a second graph). With `known` False, sdpa_kind reads the mask as it does outside."""
    before, _Known.no_padding = _Known.no_padding, bool(known)
    try:
        yield
    finally:
        _Known.no_padding = before


def no_padding(batch: dict) -> bool:
    """Whether a family's batch, still on the host, has an attention_mask with no padding in it (packed rows): what
    rows_without_padding lets the forward know without reading the device's copy."""
    mask = batch.get("attention_mask")
    return isinstance(mask, Tensor) and mask.device.type == "cpu" and bool(mask.all())


def sdpa_kind(structure: MaskMod, attention_mask: Tensor, training: bool) -> str | None:
    """What attention may tell SDPA instead of handing it the materialised mask of `structure` AND the padding
    (attention.inputs.PassInputs.mask_kind), decided once per batch: "full" for bidirectional() with no padding in
    the batch (no mask at all), "causal" for causal() with no padding (is_causal=True), or, while training, with
    right padding only: a real query then reads only real keys before it under either mask, so every real
    position's output, the loss and the gradients are the same, and only the outputs at padding positions (read by
    no loss) differ. None for anything else: the mask is used as it is. Both let SDPA's flash kernels run."""
    if structure is not _every_key and structure is not _left_to_right:
        return None
    if _Known.no_padding or bool(attention_mask.all()):
        return "full" if structure is _every_key else "causal"
    right_padded = not bool((attention_mask[:, 1:] & ~attention_mask[:, :-1]).any())
    return "causal" if structure is _left_to_right and training and right_padded else None


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


def hidden_keys(hidden: Tensor) -> MaskMod:
    """No query sees a hidden key (B, L) bool: XLNet's pseudo-log-likelihood hides the scored token from every
    stream, its own content stream excepted (see families/xlnet.py)."""
    show = ~hidden.bool()
    return lambda b, h, q, kv: show[b, kv]


def diagonal() -> MaskMod:
    """Query i sees key i: what XLNet's content stream adds to its query stream's mask."""
    return lambda b, h, q, kv: q == kv


def from_perm_mask(perm_mask: Tensor) -> Tensor:
    """HuggingFace's / the XLNet code's perm_mask (B, L, L), 1 = i may NOT attend to j, as this library's
    boolean convention (True = may attend). The one place the convention flips."""
    if perm_mask.dim() != 3 or perm_mask.shape[1] != perm_mask.shape[2]:
        raise ValueError(f"perm_mask must be (batch, length, length), got {tuple(perm_mask.shape)}")
    return perm_mask == 0


def to_perm_mask(may_attend: Tensor) -> Tensor:
    """The inverse of from_perm_mask: a float perm_mask for HuggingFace XLNet (1.0 = may not attend)."""
    return (~may_attend.bool()).float()


def rank_from_order(order: Tensor) -> Tensor:
    """A factorization order (B, L): order[b, t] = the position predicted at step t, every row a permutation of
    0..L-1; returns rank[b, i] = the step of position i. Anything else is a ValueError naming the row."""
    if order.dim() != 2:
        raise ValueError(f"a factorization order must be (batch, length), got shape {tuple(order.shape)}")
    expected = torch.arange(order.shape[1], device=order.device)
    bad = (order.sort(dim=1).values != expected).any(dim=1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"factorization order row {row} is not a permutation of 0..{order.shape[1] - 1}: "
                         f"{order[row].tolist()}")
    return order.argsort(dim=1)


def real_rank(rank: Tensor, attention_mask: Tensor) -> Tensor:
    """`rank` renumbered so that the real tokens take steps 0..n-1 in their order and padding comes after."""
    key = rank.long() + (~attention_mask.bool()).long() * (rank.shape[1] + 1)
    return key.argsort(dim=1).argsort(dim=1)


def partial_targets(rank: Tensor, attention_mask: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """XLNet's partial prediction: the last ceil(n/k) real tokens of each order (n = that row's real tokens).
    Returns (positions (B, T), valid (B, T) bool), T the most of any row, each row's targets in position order
    and its unused slots valid=False (position 0)."""
    if k < 1:
        raise ValueError(f"partial prediction needs K >= 1, got {k}")
    real = attention_mask.bool()
    n = real.sum(dim=1)
    count = (n + k - 1) // k
    rank = real_rank(rank, real)
    chosen = real & (rank >= (n - count)[:, None])
    T = max(int(count.max()), 1)
    # positions of the chosen tokens first (in position order), then the rest
    key = (~chosen).long() * rank.shape[1] + torch.arange(rank.shape[1], device=rank.device)[None]
    positions = key.argsort(dim=1)[:, :T]
    valid = torch.arange(T, device=rank.device)[None] < count[:, None]
    return positions.masked_fill(~valid, 0), valid


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
    noise = torch.rand(batch, max_len, generator=generator).to(lengths.device)
    noise = noise.masked_fill(torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None], 2.0)
    return noise.argsort(dim=1).argsort(dim=1)


class MaskPicture(NamedTuple):
    """A structural mask a family declares (families/base.py `masks_shown`), by name: what `maskplay masks` draws
    and family_mask builds. structure(segment_ids, rank) -> MaskMod; either may be None where it is not needed."""

    name: str
    title: str
    structure: Callable[[Tensor | None, Tensor | None], MaskMod]
    in_all: bool = True  # drawn by `maskplay masks --family all` (False where another picture is the same)


def mask_pictures() -> dict[str, MaskPicture]:
    """Every registered family's masks by name (a family's own, or one of its streams, e.g. xlnet-query)."""
    return {picture.name: picture for cls in registered().values() for picture in cls.masks_shown}


def family_mask(family: str, attention_mask: Tensor, segment_ids: Tensor | None = None,
                rank: Tensor | None = None) -> MaskMod:
    """The structural mask of a family (or of one of its streams) AND the padding mask, as used at the attention
    call."""
    picture = mask_pictures().get(family)
    if picture is None:
        raise ValueError(f"unknown mask family {family!r}; choose one of {sorted(mask_pictures())}")
    return and_masks(picture.structure(segment_ids, rank), padding(attention_mask))


def required(value: Tensor | None, name: str, family: str) -> Tensor:
    """A structure's input, or the one-line error naming it."""
    if value is None:
        raise ValueError(f"the {family} mask needs {name}")
    return value
