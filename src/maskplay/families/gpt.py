"""GPT: the same backbone under a causal mask; position i predicts token i + 1 through the tied head."""

from __future__ import annotations

from torch import Tensor

from ..masks import and_masks, causal, materialize, padding
from ..modeling import MaskplayModel
from ..outputs import ModelOutput


class GPT(MaskplayModel):
    family = "gpt"

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                output_hidden_states: bool = False) -> ModelOutput:
        """labels are aligned with input_ids (as in HuggingFace): the shift happens here, so logits row k
        predicts labels[:, 1:] at its k-th non-ignored entry."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        B, L = input_ids.shape
        mask = materialize(and_masks(causal(), padding(attention_mask)), B, L, device=input_ids.device)
        h, states = self.encoder(self.embed(input_ids), mask, output_hidden_states=output_hidden_states,
                                 tokens=self._real_tokens(attention_mask))
        if labels is None:
            return self.output(h, None, states)
        shifted = labels[:, 1:].clone()
        out = self.output(h[:, :-1], shifted, states)
        out.last_hidden_state = h
        return out
