"""What one forward pass hands every block and every attention layer, built once per pass (backbone.Encoder, XLNet's
loop) rather than threaded through each call as nine arguments. A layer reads its own entries by its index: the
keys/values projected for it and its slot of the key/value cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from torch import Tensor

if TYPE_CHECKING:
    from ..positions import Frame, PassPositions
    from .long_attention import BandedMask
    from .packing import Packing


class KeyValueStore(Protocol):
    """cache.KVCache, or a wrapper of it (attention/lsra.py): where a layer's new keys/values go."""

    def append(self, index: int, k: Tensor | None, v: Tensor) -> tuple[Tensor, Tensor]: ...


@dataclass(frozen=True, slots=True)
class PassInputs:
    """`mask`: (B, 1, Lq, Lk) bool (True = may attend) or float (a position bias, -inf where forbidden), or a
    BandedMask for the banded kernel (attention/long_attention.py). `dead_rows`: the queries that may attend to nothing,
    whose output is zeroed (dense.guard_empty_rows). `kv`: an unprojected key/value stream, when the queries' stream is not
    it (PLL's last-layer rows; the LSRA branch's half). `keys_values`: per layer index, keys/values already projected
    (T-TA's, from the embedding output; XLNet's, from memory + content; keys None for a synthesizer). `packing`: h,
    kv and keys_values hold the real tokens only, (N, C). `cache`: self-attention appends the new tokens' keys/values
    at the layer's index and attends to all of them; `mask` is then (B, 1, Lnew, Lcached + Lnew). `frame`: the
    relative positions (exactly when the layers have relative-position weights). `positions`: the query/key positions
    and rotary tables (positions.PassPositions). `mask_kind`: "causal" or "full" where the pass knows that `mask` is,
    at every position a loss reads, exactly the causal or the all-true mask (masks.sdpa_kind; boolean, square, no
    bias folded in): plain SDPA is then called with is_causal or no mask (dense.sdpa_known), which lets its flash
    kernels run."""

    mask: Tensor | BandedMask
    dead_rows: Tensor | None = None
    kv: Tensor | None = None
    keys_values: Sequence[tuple[Tensor | None, Tensor] | None] | None = None
    packing: Packing | None = None
    cache: KeyValueStore | None = None
    frame: Frame | None = None
    positions: PassPositions | None = None
    mask_kind: str | None = None
