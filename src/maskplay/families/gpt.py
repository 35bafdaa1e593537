"""GPT: the same backbone under a causal mask; position i predicts token i + 1 through the tied head."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..cache import KVCache
from ..generation import check_ids, forward_cached, last_real
from ..masks import MaskPicture
from ..masks import causal as left_to_right
from ..modeling import IGNORE_INDEX
from ..outputs import ModelOutput
from .base import MaskplayModel


class GPT(MaskplayModel):
    family = "gpt"
    causal = True
    score_methods = ("causal",)
    default_pooling = "last"  # the only token that has read the whole input
    growable = True
    predicted_fraction = 1.0
    masks_shown = (MaskPicture("gpt", "GPT: causal", lambda segments, rank: left_to_right()),)
    hf_code = {"mask": "causal", "causal_mask": "causal", "query_stream": False, "segments": "none"}

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                output_hidden_states: bool = False) -> ModelOutput:
        """labels are aligned with input_ids (as in HuggingFace): the shift happens here, so logits row k
        predicts labels[:, 1:] at its k-th non-ignored entry."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        h, states = self.encode_under(left_to_right(), input_ids, attention_mask, output_hidden_states=output_hidden_states)
        if labels is None:
            return self.output(h, None, states)
        shifted = labels[:, 1:].clone()
        out = self.output(h[:, :-1], shifted, states)
        out.last_hidden_state = h
        return out

    def score_positions(self, runner: Any, ids: Tensor, attention_mask: Tensor, rows: Tensor, cols: Tensor,
                        targets: Tensor, boundaries_first: bool = False) -> Tensor:
        """Position i is predicted by the output one position to its left (cols >= 1)."""
        hidden = runner.forward(ids, attention_mask=attention_mask).last_hidden_state
        return runner.log_probs(hidden[rows, cols - 1], targets)

    def num_targets(self, batch: dict[str, Tensor]) -> int:
        return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())  # shifted inside forward: position 0 is no target

    # ---- generation hooks (maskplay.generation) ----------------------------------------------------------

    def prefill(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> tuple[KVCache, Tensor]:
        """The prompts (B, L), padded on either side, under the causal mask; positions count from each row's
        first real token. GPT has no segments: token_type_ids is ignored."""
        check_ids(self, input_ids)
        if attention_mask is None:
            attention_mask = input_ids != self.config.pad_token_id
        cache = KVCache(self.config.num_layers)
        h = forward_cached(self, input_ids, attention_mask.bool(), cache)
        return cache, self.logits(last_real(h, attention_mask))

    def step(self, new_ids: Tensor, cache: KVCache, new_mask: Tensor | None = None) -> Tensor:
        if new_mask is None:
            new_mask = torch.ones_like(new_ids, dtype=torch.bool)
        h = forward_cached(self, new_ids, new_mask.bool(), cache)
        return self.logits(last_real(h, new_mask))
