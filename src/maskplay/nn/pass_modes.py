"""How one pass of the encoder runs, one small type per mode (backbone.Encoder.forward's `mode`): a full pass on
the real tokens only (Packed), the last block at one row per sequence (LastLayerRows, PLL's reading), new tokens
against a key/value cache (Cached), or a segment after Transformer-XL memory (WithMemory). A pass has one mode or
none, so the modes cannot be combined by mistake; the key/value source of T-TA (`kv`) is an input, not a mode."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

if TYPE_CHECKING:
    from .cache import KVCache


@dataclass(frozen=True)
class LastLayerRows:
    """Run the last block at one position per row only: `positions` (B,), the output then (B, 1, H). PLL reads
    one masked position per copy, and the last block's queries, attention output and FFN are needed nowhere else
    (its keys and values still come from every position of the block below)."""

    positions: Tensor

    def check(self, batch: int, length: int) -> None:
        p = self.positions
        if p.shape != (batch,) or bool(((p < 0) | (p >= length)).any()):
            raise ValueError(f"last_layer_rows must hold a ({batch},) tensor of positions in [0, {length}), "
                             f"got shape {tuple(p.shape)}")

    def shifted(self, by: int) -> LastLayerRows:
        return self if by == 0 else LastLayerRows(self.positions + by)


@dataclass(frozen=True)
class Packed:
    """`tokens` (B, L) bool, the real tokens: every layer but attention runs on those alone (attention.packing),
    and the outputs, hidden states included, are zero at the other positions."""

    tokens: Tensor


@dataclass(frozen=True)
class Cached:
    """Inference, self-attention: the pass's input holds the new tokens only, (B, Lnew, H); each layer appends
    their keys/values to `cache` (whose cache.extend reserved their slots and made the mask, (B, 1, Lnew,
    Lcached + Lnew)) and attends to everything cached."""

    cache: KVCache


@dataclass(frozen=True)
class WithMemory:
    """Transformer-XL's segment recurrence: one (B, M, H) tensor per layer, that layer's input over the M tokens
    before the segment, prepended to its keys/values; the mask is then (B, 1, L, M + L). The caller detaches it."""

    memory: Sequence[Tensor]

    @property
    def length(self) -> int:
        return self.memory[0].shape[1] if len(self.memory) else 0


PassMode = Packed | LastLayerRows | Cached | WithMemory
