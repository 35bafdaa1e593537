"""T-TA (Shin et al., ACL 2020): every token predicted from all the others in one pass.

Queries start from the [MASK] embedding + position (same LayerNorm, own dropout); keys and values are the
embedding output X in every layer, each layer projecting X with its own weights; the mask is padding AND
not-diagonal, so output i never depends on token i at any depth. Targets: every real token."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ..nn.dropout import Dropout
from ..nn.masks import MaskPicture, and_masks, bidirectional, materialize, no_diagonal, padding, sdpa_kind
from ..nn.outputs import ModelOutput
from ..nn.pass_modes import LastLayerRows
from ..nn.score_rules import PLL_RULES, ScoreRule
from .base import MaskplayModel


class TTA(MaskplayModel):
    family = "tta"
    # one pass: output i never sees token i, so it predicts the piece at i itself
    score_rules = (ScoreRule("one-pass"), *PLL_RULES)
    default_pooling = "mean"
    growable = True
    has_diagonal_switch = True
    predicted_fraction = 1.0
    masks_shown = (MaskPicture("tta", "T-TA: no diagonal", lambda segments, rank: no_diagonal()),)
    hf_code = {"mask": "no_diagonal", "causal_mask": None, "query_stream": True, "segments": "none"}

    def __init__(self, config) -> None:
        super().__init__(config)
        self.query_dropout = Dropout(config.hidden_dropout)

    def downstream_kwargs(self, input_ids: Tensor, token_type_ids: Tensor | None) -> dict[str, Any]:
        return {"diagonal_mask": False}  # each position sees its own token downstream, as the paper does

    def embedding_kwargs(self, diagonal_mask: bool = True) -> dict[str, Any]:
        return {"diagonal_mask": diagonal_mask}

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                output_hidden_states: bool = False, diagonal_mask: bool = True,
                last_layer_rows: LastLayerRows | None = None) -> ModelOutput:
        """diagonal_mask=False lets each position see its own token: for feature extraction and fine-tuning,
        as the paper does downstream. Language-model scores need the default. last_layer_rows: the last block
        runs at one position per row (pass_modes.LastLayerRows)."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        cfg = self.config
        x = self.embed(input_ids)
        query_ids = attention_mask.long() * cfg.mask_token_id + (~attention_mask).long() * cfg.pad_token_id
        h = self.embed(query_ids, dropout=self.query_dropout)
        structure = no_diagonal() if diagonal_mask else bidirectional()
        B, L = input_ids.shape
        mask = materialize(and_masks(structure, padding(attention_mask)), B, L, device=input_ids.device)
        last_layer_rows = self._last_layer_rows(last_layer_rows, labels)
        h, states = self.encoder(h, mask, kv=x, output_hidden_states=output_hidden_states,
                                 mode=self.pass_mode(attention_mask, last_layer_rows),
                                 mask_kind=sdpa_kind(structure, attention_mask, self.training))
        return self.output(h, labels, states)
