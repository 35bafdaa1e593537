"""BERT masked LM: 15 % of real tokens selected (config.mask_probability), 80 % -> [MASK], 10 % -> random,
10 % kept; the head runs only at the selected positions."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..nn.masks import MaskMod, MaskPicture, bidirectional
from ..nn.modeling import IGNORE_INDEX
from ..nn.outputs import ModelOutput
from ..nn.pass_modes import LastLayerRows
from .base import MaskplayModel


class BertMLM(MaskplayModel):
    family = "bert"
    pair_segments = True
    growable = True
    masks_shown = (MaskPicture("bert", "BERT-MLM / ELECTRA: bidirectional", lambda segments, rank: bidirectional()),)
    hf_code = {"mask": "bidirectional", "causal_mask": None, "query_stream": False, "segments": "given"}

    @property
    def mask_probability(self) -> float:
        return self.config.mask_probability

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                token_type_ids: Tensor | None = None, output_hidden_states: bool = False,
                last_layer_rows: LastLayerRows | None = None) -> ModelOutput:
        """last_layer_rows: the last block runs at one position per row (pass_modes.LastLayerRows)."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        return self.under_mask(bidirectional(), input_ids, attention_mask, labels, token_type_ids,
                               output_hidden_states, last_layer_rows)

    def under_mask(self, structure: MaskMod, input_ids: Tensor, attention_mask: Tensor, labels: Tensor | None,
                   token_type_ids: Tensor | None, output_hidden_states: bool,
                   last_layer_rows: LastLayerRows | None) -> ModelOutput:
        """BERT's forward pass under a structural mask: UniLM is BERT's weights under its own."""
        last_layer_rows = self._last_layer_rows(last_layer_rows, labels)
        h, states = self.encode_under(structure, input_ids, attention_mask, token_type_ids, output_hidden_states,
                                      last_layer_rows)
        return self.output(h, labels, states)

    def downstream_kwargs(self, input_ids: Tensor, token_type_ids: Tensor | None) -> dict[str, Any]:
        return {"token_type_ids": token_type_ids}

    def training_batch(self, input_ids: Tensor, attention_mask: Tensor,
                       generator: torch.Generator | None = None) -> dict[str, Tensor]:
        corrupted, labels = mask_tokens(input_ids, attention_mask, self.config.special_token_ids,
                                        self.config.mask_token_id, self.config.vocab_size,
                                        self.mask_probability, generator)
        return {"input_ids": corrupted, "attention_mask": attention_mask, "labels": labels}


def mask_tokens(input_ids: Tensor, attention_mask: Tensor, special_ids: list[int], mask_id: int,
                vocab_size: int, probability: float = 0.15, generator: torch.Generator | None = None,
                mask_share: float = 0.8, random_share: float = 0.1) -> tuple[Tensor, Tensor]:
    """BERT's corruption: `probability` of the real tokens selected, of those mask_share -> [MASK],
    random_share -> a random token, the rest kept (ELECTRA: 0.85 / 0 / 0.15). Special tokens are never
    selected; a batch with none selected by chance gets its first eligible token selected, so the loss is
    always defined."""
    eligible = attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(special_ids, device=input_ids.device))
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    selected = eligible & (draw < probability)
    if not bool(selected.any()) and bool(eligible.any()):
        first = eligible.flatten().nonzero()[0, 0]
        selected.view(-1)[first] = True
    labels = input_ids.masked_fill(~selected, IGNORE_INDEX)
    action = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator, device=input_ids.device)
    corrupted = torch.where(selected & (action < mask_share), torch.full_like(input_ids, mask_id), input_ids)
    corrupted = torch.where(selected & (action >= mask_share) & (action < mask_share + random_share), random_ids,
                            corrupted)
    return corrupted, labels
