"""GPT: the same backbone under a causal mask; position i predicts token i + 1 through the tied head."""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import ModelConfig
from ..nn.cache import KVCache
from ..nn.generation_hooks import check_ids, forward_cached, last_real
from ..nn.masks import MaskPicture
from ..nn.masks import causal as left_to_right
from ..nn.modeling import IGNORE_INDEX
from ..nn.outputs import ModelOutput
from ..nn.score_rules import PassRunner, ScoreRule
from .base import MaskplayModel


class GPT(MaskplayModel):
    family = "gpt"
    causal = True
    score_rules = (ScoreRule("causal", offset=-1, left_to_right=True),)  # piece i from the output at i - 1
    default_pooling = "last"  # the only token that has read the whole input
    growable = True
    trains_with_memory = True
    xl_positions = True  # Transformer-XL's own positions (Dai et al. 2019): a causal stream under its relative term
    predicted_fraction = 1.0
    masks_shown = (MaskPicture("gpt", "GPT: causal", lambda segments, rank: left_to_right()),)
    hf_code = {"mask": "causal", "causal_mask": "causal", "query_stream": False, "segments": "none"}

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                output_hidden_states: bool = False, mems: list[Tensor] | None = None,
                memory_length: int | None = None) -> ModelOutput:
        """labels are aligned with input_ids (as in HuggingFace): the shift happens here, so logits row k
        predicts labels[:, 1:] at its k-th non-ignored entry.

        Transformer-XL's segment recurrence (`memory_length` M > 0; check_memory says which configs have it): every
        query also sees `mems`, each layer's input over the tokens before this segment (one (B, M', H) tensor per
        layer, M' <= M; None or [] at a text's start), detached here so that no gradient reaches them;
        ModelOutput.mems is the memory for the next segment, each layer's input over the last M tokens of memory +
        segment. The segment must hold no padding (memory keys are seen by every query)."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        memory: list[Tensor] = []
        if mems and not memory_length:
            raise ValueError("mems need memory_length (how many tokens of memory to keep for the next segment)")
        if memory_length:
            self.check_memory(self.config)
            if not bool(attention_mask.all()):
                raise ValueError("a segment with memory must hold no padding (its memory keys are seen by every query)")
            memory = [m.detach() for m in mems] if mems else []
            if memory and (len(memory) != self.config.num_layers or memory[0].shape[0] != input_ids.shape[0]):
                raise ValueError(f"mems: one (B={input_ids.shape[0]}, M, H) tensor per layer "
                                 f"({self.config.num_layers}), got {len(memory)} of {tuple(memory[0].shape)}")
            output_hidden_states = True  # each layer's input: the next memory
        h, states = self.encode_under(left_to_right(), input_ids, attention_mask,
                                      output_hidden_states=output_hidden_states, memory=memory or None)
        if labels is None:
            out = self.output(h, None, states)
        else:
            out = self.output(h[:, :-1], self.loss_labels(labels).clone(), states, source=labels)
            out.last_hidden_state = h
        if memory_length:
            assert states is not None
            out.mems = [torch.cat([*memory[index:index + 1], state.detach()], dim=1)[:, -memory_length:]
                        for index, state in enumerate(states[:-1])]
        return out

    def loss_labels(self, labels: Tensor) -> Tensor:
        """Position k predicts token k + 1."""
        return labels[:, 1:]

    @classmethod
    def check_memory(cls, config: ModelConfig) -> None:
        """Transformer-XL memory needs positions that are distances (its keys sit before the segment's start):
        positions acting inside attention, and plain q . k attention on one stream."""
        if config.positions not in ("transformer-xl", "alibi", "t5", "rotary", "none"):
            raise ValueError(f"Transformer-XL memory (run.memory_length, overflow='memory') needs relative positions: "
                             f"positions = 'transformer-xl', 'alibi', 't5', 'rotary' or 'none', not {config.positions!r} "
                             "(absolute positions restart every segment)")
        clash = [name for name, on in (("model.long", config.long.enabled), ("denseformer", config.denseformer),
                                       ("reversible", config.reversible),
                                       (f"attention = {config.attention!r}", config.attention != "dot")) if on]
        if clash:
            raise ValueError(f"memory (run.memory_length) runs plain q . k attention layers: not with {clash[0]}")

    def memory_length(self) -> int | None:
        """Scoring with memory (overflow='memory') where the config has it (check_memory): no cap of its own (0)."""
        try:
            self.check_memory(self.config)
        except ValueError:
            return None
        return 0

    def memory_pass(self, run: PassRunner, ids: Tensor, attention_mask: Tensor, mems: list[Tensor],
                    memory_tokens: int) -> tuple[Tensor, list[Tensor], int]:
        """Output p predicts token p + 1 (s = 1). A right-padded row (a text's shorter last segment) runs with its
        padding as tokens: under the causal mask no real position reads a later one, so the real positions'
        outputs are those without it (and that row's memory, which holds it, is never carried: its text ends)."""
        everything = torch.ones_like(attention_mask)
        if not memory_tokens:
            return run.forward(ids, attention_mask=everything).last_hidden_state, [], 1
        out = run.forward(ids, attention_mask=everything, mems=mems, memory_length=memory_tokens)
        return out.last_hidden_state, out.mems, 1

    def num_targets(self, batch: dict[str, Tensor]) -> int:
        return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())  # shifted inside forward: position 0 is no target

    # ---- generation hooks (maskplay.nn.generation_hooks) --------------------------------------------------------

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
