"""The family contract's generation hooks and the helpers the families write them with (core; the decoding task,
greedy / beam / sampling, is maskplay.tasks.decoding).

A family generates when it implements both hooks (MaskplayModel.__init_subclass__ then sets its class attribute
`can_generate = True`; GPT does, UniLM and GPT-BERT plug in the same way):

    prefill(input_ids, attention_mask=None, token_type_ids=None) -> (KVCache, next_token_logits)
        The prompts (B, L), padded on either side, computed once under the family's prefix mask (GPT: causal;
        UniLM: bidirectional over the source), their keys/values kept in a new cache.KVCache; the logits
        (B, V) predict each row's first new token (they are read at the row's last real token).
    step(new_ids, cache, new_mask=None) -> next_token_logits
        New tokens (B, T), new_mask (B, T) marking the real ones (a finished row feeds a hole), attending to
        every real cached token and to the real new tokens at or before themselves; their keys/values are
        appended to the cache; the logits (B, V) predict the token after each row's last real new token.

`forward_cached` below does the shared work of both hooks (positions, mask, embedding, encoder); a family
adds its own token types and head. Also from the contract: `generated_token_type` (the segment id of
generated tokens, UniLM's 1: the uncached reference path passes it for them) and `generation_frame(tokenizer)
-> (prefix ids, suffix ids)` (how a text becomes a prompt; default `[SOS] text`, UniLM's `[SOS] text [SEP]`).
`Generative` states that contract as a Protocol: what the decoding task may use of a model."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..registry import registered
from .cache import KVCache
from .pass_modes import Cached

if TYPE_CHECKING:
    from .modeling import ModelBase


class Generative(Protocol):
    """A model that generates: the family contract's generation part (families/base.MaskplayModel)."""

    config: ModelConfig
    can_generate: bool
    generated_token_type: int | None
    training: bool

    def prefill(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> tuple[Any, Tensor]: ...

    def step(self, new_ids: Tensor, cache: Any, new_mask: Tensor | None = None) -> Tensor: ...

    def generation_frame(self, tokenizer: Any) -> tuple[Sequence[int], Sequence[int]]: ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def eval(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...


def can_generate(model: object) -> bool:
    """Whether a model (or a model class) says it generates (the family contract's `can_generate`)."""
    return bool(getattr(model, "can_generate", False))


def generating_families() -> list[str]:
    return sorted(name for name, cls in registered().items() if cls.can_generate)


def require_generative(model: object) -> None:
    if not can_generate(model):
        family = getattr(getattr(model, "config", None), "family", type(model).__name__)
        raise ValueError(f"a {family!r} model cannot generate text (it has no left-to-right factorisation); "
                         f"families that can: {', '.join(generating_families())}")


def embed_at(model: ModelBase, input_ids: Tensor, token_type_ids: Tensor | None, positions: Tensor) -> Tensor:
    """MaskplayModel.embed with each token's absolute position given."""
    x = model.embeddings(input_ids, token_type_ids, positions=positions)
    return x if model.embeddings_project is None else model.embeddings_project(x)


def forward_cached(model: ModelBase, input_ids: Tensor, new_mask: Tensor, cache: KVCache,
                   token_type_ids: Tensor | None = None, within: Tensor | None = None) -> Tensor:
    """The last block's output (B, T, H) for new tokens `input_ids` (B, T) appended to `cache`: their positions
    follow each row's cached real tokens, and they attend to those and, among themselves, as `within` allows
    (default: causal; see KVCache.extend). new_mask (B, T) marks the real new tokens."""
    if not cache.static:
        check_ids(model, input_ids)
    cfg = model.config
    positions, mask = cache.extend(new_mask, within)
    cache.check_positions(cfg.max_position)
    h, _ = model.encoder(embed_at(model, input_ids, token_type_ids, positions), mask, mode=Cached(cache))
    return h


def last_real(h: Tensor, mask: Tensor) -> Tensor:
    """h (B, L, H) at each row's last real position (mask (B, L) bool), (B, H): where the next token is
    predicted, whichever side the padding is on."""
    L = mask.shape[1]
    last = L - 1 - mask.bool().flip(1).int().argmax(1)
    return h[torch.arange(h.shape[0], device=h.device), last]


def check_ids(model: ModelBase, input_ids: Tensor) -> None:
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2 or input_ids.numel() == 0:
        raise ValueError(f"input_ids must be a non-empty 2-D (batch, length) tensor, got "
                         f"{getattr(input_ids, 'shape', type(input_ids))}")
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= model.config.vocab_size:
        raise ValueError(f"token id {lo if lo < 0 else hi} is out of range for a vocabulary of {model.config.vocab_size}")
