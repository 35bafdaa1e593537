"""UniLM (Dong et al., NeurIPS 2019) as bert4keras builds it: a BERT turned into a seq2seq model by
its attention mask alone. No new weights: the state dict is BertMLM's, so any BERT checkpoint initialises it.

Input `[SOS] source [SEP] target [EOS]` (`[CLS] source [SEP] target [SEP]` with a BERT vocabulary): segment 0
up to and including the first separator, segment 1 after it. Source tokens see the whole source; target tokens
see the source and the target at or before themselves (masks.prefix_lm); padding is a separate mask, joined at
the attention call. Segment ids feed the segment embeddings when the model has them (type_vocab_size >= 2).

Objectives (config.unilm.objective):
- seq2seq (fine-tuning): BERT's own MLM head at position j predicts token j + 1 wherever token j + 1 is in the
  target, so the separator predicts the first target token and the last target token predicts the end token;
  the loss is on target tokens only.
- mixed (UniLM pretraining): each batch draws one mask, bidirectional / left-to-right / right-to-left / seq2seq
  with probabilities 1/3, 1/6, 1/6, 1/3, with BERT's masked-token targets (15 %, 80/10/10). A sequence without
  a separator is split at a random point for the seq2seq mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..nn.cache import KVCache
from ..nn.generation_hooks import check_ids, forward_cached, last_real
from ..nn.masks import MaskMod, MaskPicture, bidirectional, causal, materialize, prefix_lm, required
from ..nn.modeling import IGNORE_INDEX
from ..nn.outputs import ModelOutput
from ..nn.pass_modes import LastLayerRows
from .bert import BertMLM, mask_tokens

# mask kinds, in the order of their probabilities in MIX
BIDIRECTIONAL, LEFT_TO_RIGHT, RIGHT_TO_LEFT, SEQ2SEQ = range(4)
MIX = (1 / 3, 1 / 6, 1 / 6, 1 / 3)


def right_to_left() -> MaskMod:
    """Query i sees keys j >= i."""
    return lambda b, h, q, kv: kv >= q


def segments_after_separator(input_ids: Tensor, separator: int) -> Tensor:
    """(B, L) long: 1 for the positions after each row's first separator, 0 up to and including it."""
    is_sep = (input_ids == separator).long()
    return ((is_sep.cumsum(1) - is_sep) > 0).long()


def structure(kind: int, segment_ids: Tensor) -> MaskMod:
    if kind == BIDIRECTIONAL:
        return bidirectional()
    if kind == LEFT_TO_RIGHT:
        return causal()
    if kind == RIGHT_TO_LEFT:
        return right_to_left()
    if kind == SEQ2SEQ:
        return prefix_lm(segment_ids)
    raise ValueError(f"mask_kind must be 0..3 (bidirectional, left-to-right, right-to-left, seq2seq), got {kind}")


UNILM_OBJECTIVES = ("seq2seq", "mixed")


@dataclass
class UnilmConfig:
    """UniLM's objective (read only by family="unilm"). seq2seq: fine-tuning on `[SOS] source [SEP] target
    [EOS]` sequences, each target position predicting the next target token through BERT's own MLM head;
    mixed: UniLM pretraining, each batch under one of the bidirectional, left-to-right, right-to-left and
    seq2seq masks (1/3, 1/6, 1/6, 1/3), with BERT's masked-token targets."""

    objective: str = "seq2seq"

    def __post_init__(self) -> None:
        if self.objective not in UNILM_OBJECTIVES:
            raise ValueError(f"unilm.objective must be one of {UNILM_OBJECTIVES}, got {self.objective!r}")


class UniLM(BertMLM):
    family = "unilm"
    settings = UnilmConfig  # [model.unilm]
    generated_token_type = 1  # generated tokens are target tokens (maskplay.tasks.decoding)
    seq2seq_overrides = ("model.unilm.objective=seq2seq",)
    masks_shown = (MaskPicture("unilm", "UniLM: prefix (seq2seq)",
                               lambda segments, rank: prefix_lm(required(segments, "segment_ids", "unilm"))),)
    hf_code = {"mask": "prefix_lm", "causal_mask": "prefix_lm", "query_stream": False, "segments": "after_separator"}

    def downstream_kwargs(self, input_ids: Tensor, token_type_ids: Tensor | None) -> dict[str, Any]:
        # bidirectional (UniLM read as BERT), one segment unless the pair says otherwise
        return {"token_type_ids": torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids,
                "mask_kind": 0}

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                token_type_ids: Tensor | None = None, output_hidden_states: bool = False,
                mask_kind: Tensor | int = SEQ2SEQ, last_layer_rows: LastLayerRows | None = None) -> ModelOutput:
        """token_type_ids: the segments (default: after the first separator, segments_after_separator);
        mask_kind: SEQ2SEQ by default (0..3, see structure)."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        if token_type_ids is None:
            token_type_ids = segments_after_separator(input_ids, self.config.separator_id)
        return self.under_mask(structure(int(mask_kind), token_type_ids), input_ids, attention_mask, labels,
                               self._segments(token_type_ids), output_hidden_states, last_layer_rows)

    def training_batch(self, input_ids: Tensor, attention_mask: Tensor,
                       generator: torch.Generator | None = None) -> dict[str, Tensor]:
        if self.config.unilm.objective == "seq2seq":
            return self._seq2seq_batch(input_ids, attention_mask)
        return self._mixed_batch(input_ids, attention_mask, generator)

    def _seq2seq_batch(self, input_ids: Tensor, attention_mask: Tensor) -> dict[str, Tensor]:
        attention_mask = attention_mask.bool()
        segments = segments_after_separator(input_ids, self.config.separator_id)
        has_target = (segments.bool() & attention_mask).any(1)
        if not bool(has_target.all()):
            row = int((~has_target).nonzero()[0, 0])
            if bool(attention_mask[row].all()):  # it fills every position: the cut, not the data, lost the target
                raise ValueError(f"sequence {row} of the batch fills all {input_ids.shape[1]} positions and has no "
                                 "target after its separator: data.max_length (--set data.max_length=N) is "
                                 "shorter than the `[SOS] source [SEP] target [EOS]` sequences, so their targets were "
                                 "cut off; raise it, or cut the sources shorter (`maskplay data titles --max-source`)")
            raise ValueError(f"sequence {row} of the batch has no target: the seq2seq objective needs "
                             f"`[SOS] source [SEP] target [EOS]` sequences (separator id {self.config.separator_id}; "
                             "`maskplay data titles` writes them), or model.unilm.objective = \"mixed\" for "
                             "pretraining on plain text")
        # position j is trained to predict token j + 1 where that token is a real target token
        labels = torch.full_like(input_ids, IGNORE_INDEX)
        target_next = segments[:, 1:].bool() & attention_mask[:, 1:]
        labels[:, :-1] = input_ids[:, 1:].masked_fill(~target_next, IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
                "token_type_ids": segments}

    def _mixed_batch(self, input_ids: Tensor, attention_mask: Tensor,
                     generator: torch.Generator | None) -> dict[str, Tensor]:
        cfg = self.config
        draw = float(torch.rand((), generator=generator))
        kind = next(k for k, edge in enumerate(torch.tensor(MIX).cumsum(0).tolist()) if draw < edge or k == 3)
        segments = segments_after_separator(input_ids, cfg.separator_id)
        lengths = attention_mask.long().sum(1)
        split = (torch.rand(lengths.shape, generator=generator) * (lengths - 2).clamp_min(1)).long() + 2
        no_separator = ~(segments.bool() & attention_mask.bool()).any(1)
        positions = torch.arange(input_ids.shape[1])[None, :]
        segments = torch.where(no_separator[:, None], (positions >= split[:, None]).long(), segments)
        corrupted, labels = mask_tokens(input_ids, attention_mask, cfg.special_token_ids, cfg.mask_token_id,
                                        cfg.vocab_size, self.mask_probability, generator)
        return {"input_ids": corrupted, "attention_mask": attention_mask, "labels": labels,
                "token_type_ids": segments, "mask_kind": torch.tensor(kind)}

    # ---- generation (maskplay.nn.generation_hooks): the source once, bidirectionally; then token by token --------

    def generation_frame(self, tokenizer: object) -> tuple[list[int], list[int]]:
        """A text becomes the prompt `[SOS] text [SEP]`: the separator predicts the first target token."""
        return [self.config.sos_token_id], [self.config.separator_id]

    def _segments(self, token_type_ids: Tensor) -> Tensor | None:
        return token_type_ids if self.config.type_vocab_size >= 2 else None

    def prefill(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> tuple[KVCache, Tensor]:
        """The prompts (B, L) under the seq2seq mask of their token types (default: all source, so the source
        sees itself bidirectionally); the logits (B, V) of the token after each row's last real token."""
        check_ids(self, input_ids)
        if attention_mask is None:
            attention_mask = input_ids != self.config.pad_token_id
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        B, T = input_ids.shape
        within = materialize(prefix_lm(token_type_ids), B, T, device=input_ids.device)
        cache = KVCache(self.config.num_layers)
        h = forward_cached(self, input_ids, attention_mask.bool(), cache, self._segments(token_type_ids), within)
        return cache, self.logits(last_real(h, attention_mask))

    def step(self, new_ids: Tensor, cache: KVCache, new_mask: Tensor | None = None) -> Tensor:
        """Target tokens (segment 1): each sees the whole cache and the new tokens at or before itself."""
        if new_mask is None:
            new_mask = torch.ones_like(new_ids, dtype=torch.bool)
        types = torch.ones_like(new_ids)
        h = forward_cached(self, new_ids, new_mask.bool(), cache, self._segments(types))
        return self.logits(last_real(h, new_mask))
