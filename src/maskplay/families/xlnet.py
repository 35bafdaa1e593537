"""XLNet (Yang et al., NeurIPS 2019): a permutation language model with two-stream attention and Transformer-XL
relative positions, on the shared blocks.

- Content stream h starts from the token embedding; query stream g from one learned vector (`query_start`,
  HuggingFace's mask_emb), so it carries a position but never its token. In layer m both streams read keys and
  values projected from the content stream of layer m-1 (and from the memory, when given): the content
  stream may see what its query stream may see plus itself, the query stream what the order puts strictly
  before it. Both streams go through the same block in one call (their rows concatenated), sharing its weights.
- Training: a random factorization order per sequence (padding outside it); only the last ceil(n/K) tokens of
  each order are targets (partial prediction, K = xlnet.partial_prediction), and the query stream exists only
  at those positions. The last layer's content rows feed nothing and are skipped.
- Positions are relative (positions.py, "transformer-xl"); no absolute table, no embedding LayerNorm, no
  biases in attention, and the LM head is the tied embedding matrix plus a bias (HuggingFace XLNetLMHeadModel).
- Segment-level recurrence: `mems` (one (B, M, H) tensor per layer, the content input of that layer in the
  previous segment) are prepended to the keys/values, seen by every query, and never receive gradient.

Every view of XLNet is one `may_see` rule over (query position, key position) - the query stream's mask:
a factorization order (training), left to right (exact sentence likelihood), "nobody sees the hidden
tokens" (pseudo-log-likelihood), HuggingFace's perm_mask (masks.from_perm_mask), or everything (features)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..nn.attention.dense import fused_linear, guard_empty_rows
from ..nn.attention.inputs import PassInputs
from ..nn.dropout import Dropout
from ..nn.heads import LMHead
from ..nn.masks import (
    MaskMod,
    MaskPicture,
    and_masks,
    bidirectional,
    diagonal,
    from_perm_mask,
    hidden_keys,
    materialize,
    or_masks,
    padding,
    partial_targets,
    permutation_content,
    permutation_query,
    rank_from_order,
    required,
)
from ..nn.modeling import IGNORE_INDEX
from ..nn.outputs import ModelOutput
from ..nn.positions import relative_frame
from ..nn.score_rules import PLL_RULES, PassRunner, ScoreRule
from ..runtime.flops import layer_flops
from .base import MaskplayModel

# (content stream, query stream, memory for the next segment, hidden states)
Streams = tuple[Tensor | None, Tensor | None, list[Tensor], tuple[Tensor, ...] | None]


class WordEmbeddings(nn.Module):
    """XLNet's input: the token embedding and dropout; positions enter attention, segments too."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size)
        self.dropout = Dropout(config.hidden_dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, dropout: nn.Module | None = None,
                positions: Tensor | None = None) -> Tensor:
        return (dropout or self.dropout)(self.word(input_ids))


class TiedHead(LMHead):
    """logits = h @ E^T + b: HuggingFace XLNet's lm_loss, tied to the token embeddings, no transform."""

    def __init__(self, config: ModelConfig) -> None:
        nn.Module.__init__(self)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def transform(self, hidden: Tensor) -> Tensor:
        return hidden


def training_flops(config: ModelConfig, seq_len: int, full: bool = False) -> float:
    """XLNet's training step per input token (forward + backward): the content stream in every layer but the
    last, the query stream (1/K of the rows, each reading every key) in every layer, the tied head (no transform)
    at the targets. full=True: what HuggingFace computes (both streams over every position in every layer)."""
    share = 1.0 / config.xlnet.partial_prediction
    layer = layer_flops(config, seq_len)
    content = config.num_layers * layer if full else (config.num_layers - 1) * layer
    query = config.num_layers * (1.0 if full else share) * layer
    return 3 * (content + query + share * 2 * config.hidden_size * config.vocab_size)


@dataclass
class XlnetConfig:
    """XLNet's switches (Yang et al., 2019); read only by family="xlnet"."""

    partial_prediction: int = 6  # K: the last ceil(n/K) tokens of each factorization order are the targets
    mem_len: int = 0  # segment-level recurrence: content states kept per layer for the next segment (0 = none)
    clamp_len: int = -1  # relative distances clamped to +-clamp_len (-1: never), as XLNet's clamp_len

    def __post_init__(self) -> None:
        if self.partial_prediction < 1:
            raise ValueError(f"xlnet.partial_prediction (K) must be at least 1 (K = 1 predicts every token), "
                             f"got {self.partial_prediction}")
        if self.mem_len < 0:
            raise ValueError(f"xlnet.mem_len must be >= 0 (0 = no memory), got {self.mem_len}")


class XLNet(MaskplayModel):
    family = "xlnet"
    settings = XlnetConfig  # [model.xlnet]
    two_streams = True
    # its query stream at position i predicts token i: left to right (causal), or under the order [SOS], [EOS], then
    # left to right (causal-boundaries); PLL hides a piece by the mask (pll_hidden)
    score_rules = (ScoreRule("causal", pass_kwargs=lambda mask: {"left_to_right": True}, left_to_right=True),
                   *PLL_RULES, ScoreRule("causal-boundaries", pass_kwargs=lambda mask: boundaries_first_view(mask),
                                         left_to_right=True))
    masked_lm_method = "pll"  # minicons' masked LM reading: its PLL, not its causal score
    default_pooling = "last"  # the content stream at the last token, as HuggingFace's summary "last"
    predicted_fraction = 1 / 6  # partial prediction at the default K = 6 (the query stream's rows not counted)
    trains_with_memory = True  # Transformer-XL's recurrence, its content stream's memory (the paper's pretraining)
    masks_shown = (MaskPicture("xlnet-content", "XLNet content stream",
                               lambda segments, rank: permutation_content(required(rank, "rank", "xlnet-content"))),
                   MaskPicture("xlnet-query", "XLNet query stream",
                               lambda segments, rank: permutation_query(required(rank, "rank", "xlnet-query"))))

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.query_start = nn.Parameter(torch.empty(1, 1, config.hidden_size).normal_(std=config.initializer_range))
        self.stream_dropout = Dropout(config.hidden_dropout)  # the query stream's start, positions, the output

    def make_embeddings(self, config: ModelConfig) -> nn.Module:
        return WordEmbeddings(config)

    def make_head(self, config: ModelConfig) -> nn.Module:
        return TiedHead(config)

    # ---- the contract's rules (families/base.py) --------------------------------------------------------

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        if config.norm_placement == "pre":
            raise ValueError("norm_placement = 'pre' is not built for family xlnet (its streams read keys/values "
                             "projected outside the blocks, unnormalised); use post or deepnorm")
        if config.type_vocab_size:
            raise ValueError("family xlnet encodes segments relatively (token_type_ids still work): set "
                             f"type_vocab_size = 0, got {config.type_vocab_size}")
        if config.embedding_size not in (None, config.hidden_size):
            raise ValueError("family xlnet has no embedding projection: leave embedding_size out")

    training_flops_per_token = staticmethod(training_flops)  # the two streams' count (the contract's hook)

    def pll_hidden(self, run: PassRunner, ids: Tensor, attention_mask: Tensor, pos: Tensor, end: Tensor,
                   offset: int | None = None) -> Tensor:
        """Hidden by its mask, not replaced: the query stream reads the others only, at the hidden piece."""
        return run.forward(ids, attention_mask=attention_mask, hide_positions=pos, hide_ends=end).last_hidden_state[:, 0]

    def memory_length(self) -> int:
        return self.config.xlnet.mem_len

    def downstream_kwargs(self, input_ids: Tensor, token_type_ids: Tensor | None) -> dict[str, Any]:
        return {"token_type_ids": token_type_ids}  # relative segment encoding

    # ---- the two streams ------------------------------------------------------------------------------

    def streams(self, input_ids: Tensor, attention_mask: Tensor, may_see: MaskMod,
                query_stream_at: Tensor | None = None, token_type_ids: Tensor | None = None,
                mems: list[Tensor] | None = None, need_content: bool = True,
                output_hidden_states: bool = False, keep_memory: bool = False) -> Streams:
        """Both streams through every block. `may_see`: the query stream's structural mask (the content stream's
        is that or the diagonal; padding keys are hidden from both). `query_stream_at` (B, T): where the query
        stream runs (None: no query stream). The memory for the next segment is kept with `keep_memory`, xlnet.mem_len
        or `mems`. Returns (content output or None when not `need_content`, query
        output (B, T, H) or None, the new memory (one tensor per layer, detached), hidden states (of the
        content stream, or of the query stream where the content stream is not needed))."""
        B, L = input_ids.shape
        cfg = self.config
        memory = self._check_mems(mems, B)
        M = memory[0].shape[1] if memory else 0
        content_mask = materialize(and_masks(or_masks(may_see, diagonal()), padding(attention_mask)), B, L,
                                   device=input_ids.device)
        rows = torch.arange(L, device=input_ids.device).expand(B, L)
        if query_stream_at is not None:
            query_mask = materialize(and_masks(may_see, padding(attention_mask)), B, L, device=input_ids.device)
            query_mask = query_mask.gather(2, query_stream_at[:, None, :, None].expand(B, 1, -1, L))
            mask = torch.cat([content_mask, query_mask], dim=2)
            rows = torch.cat([rows, query_stream_at], dim=1)
        else:
            mask = content_mask
        if M:
            mask = torch.cat([mask.new_ones(B, 1, mask.shape[2], M), mask], dim=3)
        mask, dead = guard_empty_rows(mask)
        keys = torch.arange(-M, L, device=input_ids.device)
        segments = key_segments = None
        if token_type_ids is None and self.training and torch.is_grad_enabled():
            # one segment: its term adds the same number to all of a query's scores, which softmax ignores (the
            # outputs are those without it), but every parameter then takes part, as DistributedDataParallel needs
            token_type_ids = torch.zeros_like(input_ids)
        if token_type_ids is not None:
            segments = token_type_ids.gather(1, rows)
            key_segments = torch.cat([token_type_ids.new_zeros(B, M), token_type_ids], dim=1)  # memory: segment 0
        frame = relative_frame(rows, keys, cfg.hidden_size, cfg.xlnet.clamp_len, segments, key_segments,
                               dropout=self.stream_dropout)
        x = self.embeddings(input_ids)
        if query_stream_at is not None:
            start = self.query_start.to(x.dtype).expand(B, query_stream_at.shape[1], -1)
            x = torch.cat([x, self.stream_dropout(start)], dim=1)
        states = [x] if output_hidden_states else None
        new_mems = []
        layers = self.encoder.layers
        keys_values: list = [None] * len(layers)  # filled layer by layer: each projects the content stream it gets
        inputs = PassInputs(mask, dead, keys_values=keys_values, frame=frame)
        for index, layer in enumerate(layers):
            content = x[:, :L]
            if keep_memory or cfg.xlnet.mem_len or mems is not None:
                new_mems.append(self._next_memory(memory[index] if memory else None, content))
            source = torch.cat([memory[index].to(x.dtype), content], dim=1) if memory else content
            keys_values[index] = fused_linear(source, layer.attn.key, layer.attn.value)
            if index == len(layers) - 1 and not need_content and query_stream_at is not None:
                # the last layer's content rows feed nothing: run its query rows alone
                rows = PassInputs(mask[:, :, L:], _rows(dead, L), keys_values=keys_values, frame=frame.rows_from(L))
                x = torch.cat([content, layer(x[:, L:].contiguous(), rows, index)], dim=1)
            else:
                x = layer(x, inputs, index)
            if states is not None:
                states.append(x)
        h = x[:, :L] if need_content else None
        g = x[:, L:] if query_stream_at is not None else None
        return h, g, new_mems, tuple(states) if states is not None else None

    def _check_mems(self, mems: list[Tensor] | None, batch: int) -> list[Tensor] | None:
        if mems is None:
            return None
        cfg = self.config
        if len(mems) != cfg.num_layers:
            raise ValueError(f"mems must hold one tensor per layer ({cfg.num_layers}), got {len(mems)}")
        for index, m in enumerate(mems):
            if m.dim() != 3 or m.shape[0] != batch or m.shape[2] != cfg.hidden_size:
                raise ValueError(f"mems[{index}] has shape {tuple(m.shape)}; this batch needs ({batch}, memory length, "
                                 f"{cfg.hidden_size}): memory from a batch of another size cannot be reused")
        if len({m.shape[1] for m in mems}) != 1:
            raise ValueError("mems of different lengths in different layers")
        return [m.detach() for m in mems] if mems[0].shape[1] else None

    def _next_memory(self, previous: Tensor | None, content: Tensor) -> Tensor:
        """The content input of a layer, appended to its memory and cut to the last mem_len (all when 0)."""
        both = content if previous is None else torch.cat([previous.to(content.dtype), content], dim=1)
        keep = self.config.xlnet.mem_len
        return (both[:, -keep:] if keep else both).detach()

    # ---- the views ------------------------------------------------------------------------------------

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                order: Tensor | None = None, target_positions: Tensor | None = None,
                token_type_ids: Tensor | None = None, mems: list[Tensor] | None = None,
                output_hidden_states: bool = False, left_to_right: bool = False,
                hide_positions: Tensor | None = None, hide_ends: Tensor | None = None,
                keep_memory: bool = False, memory_length: int | None = None) -> ModelOutput:
        """One entry point for every view (so that bf16 scoring can run any of them through the runner's bf16 copy):

        - `order` (B, L; each row a permutation of the positions, order[b, t] = the position predicted at step t):
          the permutation LM. The query stream runs at `target_positions` (B, T) (default: partial prediction,
          the last ceil(n/K) real tokens of each order); last_hidden_state (B, T, H) is its output and `labels`
          (B, T) are aligned with target_positions (-100 = no loss).
        - `left_to_right`: the query stream at every position under the left-to-right order (see left_to_right).
        - `hide_positions` (B,): the query stream at that one position per row, tokens [hide_positions,
          hide_ends) hidden from every stream (see from_others).
        - none of these: the content stream with every token seeing every other, (B, L, H), for features (embed,
          eval, fine-tuning).
        ModelOutput.mems: the memory for the next segment (with `keep_memory`, xlnet.mem_len or `mems`; [] otherwise).
        Memory keys are seen by every query, padding included: carry memory from segments without padding.
        `memory_length` (run.memory_length; the permutation LM): keep the last memory_length tokens as memory."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        if sum([order is not None, left_to_right, hide_positions is not None]) > 1:
            raise ValueError("choose one view: order=..., left_to_right=True or hide_positions=...")
        if (target_positions is not None or labels is not None) and order is None:
            raise ValueError("target_positions and labels need a factorization order (order=...)")
        B, L = input_ids.shape
        if left_to_right and not keep_memory and self._in_groups(attention_mask, mems, token_type_ids,
                                                                 output_hidden_states):
            return self._grouped(input_ids, attention_mask)
        if left_to_right:
            everywhere = torch.arange(L, device=input_ids.device).expand(B, L)
            _, g, new_mems, states = self.streams(input_ids, attention_mask, _strictly_before(), everywhere,
                                                  token_type_ids, mems, need_content=False, keep_memory=keep_memory,
                                                  output_hidden_states=output_hidden_states)
            return _with_mems(self.output(g, None, states), new_mems)
        if hide_positions is not None:
            if hide_positions.shape != (B,):
                raise ValueError(f"hide_positions must be ({B},), one position per row, got {tuple(hide_positions.shape)}")
            ends = hide_positions + 1 if hide_ends is None else hide_ends
            columns = torch.arange(L, device=input_ids.device)[None]
            hidden = (columns >= hide_positions[:, None]) & (columns < ends[:, None])
            _, g, new_mems, states = self.streams(input_ids, attention_mask, hidden_keys(hidden),
                                                  hide_positions[:, None], token_type_ids, mems, need_content=False,
                                                  output_hidden_states=output_hidden_states)
            return _with_mems(self.output(g, None, states), new_mems)
        if order is None:
            h, _, new_mems, states = self.streams(input_ids, attention_mask, bidirectional(), None, token_type_ids,
                                                  mems, output_hidden_states=output_hidden_states)
            return _with_mems(self.output(h, None, states), new_mems)
        if order.shape != input_ids.shape:
            raise ValueError(f"order has shape {tuple(order.shape)}, input_ids {tuple(input_ids.shape)}")
        rank = rank_from_order(order)
        if target_positions is None:
            target_positions, valid = partial_targets(rank, attention_mask, self.config.xlnet.partial_prediction)
            if labels is None:
                labels = input_ids.gather(1, target_positions).masked_fill(~valid, IGNORE_INDEX)
        elif labels is not None and labels.shape != target_positions.shape:
            raise ValueError(f"labels {tuple(labels.shape)} must be aligned with target_positions "
                             f"{tuple(target_positions.shape)}")
        _, g, new_mems, states = self.streams(input_ids, attention_mask, permutation_query(rank), target_positions,
                                              token_type_ids, mems, need_content=False,
                                              output_hidden_states=output_hidden_states, keep_memory=bool(memory_length))
        return _with_mems(self.output(self.stream_dropout(g), labels, states), new_mems, memory_length)

    # rows per group when a padded inference batch is cut by length (see _grouped)
    GROUP = 8

    def _in_groups(self, attention_mask: Tensor, mems: list[Tensor] | None, token_type_ids: Tensor | None,
                   output_hidden_states: bool) -> bool:
        """Whether a left-to-right pass runs in groups of rows: at inference, on a right-padded batch of more than
        one group, without memory, segments or hidden states to return."""
        if self.training or torch.is_grad_enabled() or mems is not None or token_type_ids is not None:
            return False
        if output_hidden_states or attention_mask.shape[0] <= self.GROUP:
            return False
        lengths = attention_mask.sum(1)
        right_padded = attention_mask == (torch.arange(attention_mask.shape[1], device=lengths.device) < lengths[:, None])
        return bool(right_padded.all()) and bool((lengths < attention_mask.shape[1]).any())

    def _grouped(self, input_ids: Tensor, attention_mask: Tensor) -> ModelOutput:
        """The left-to-right pass in groups of GROUP rows, each cut to its longest row. Every per-token layer of
        XLNet runs on both streams at every padded position, so a scoring batch sorted by length (32 sentences of
        69 down to 39 pieces) would spend a third of its work on padding; in groups of 8 it spends a tenth. Rows
        do not interact, so the outputs are those of one pass (zeros past each group's end)."""
        B, L = input_ids.shape
        lengths = attention_mask.sum(1)
        out = None
        for start in range(0, B, self.GROUP):
            end = int(lengths[start:start + self.GROUP].max())
            g = self(input_ids[start:start + self.GROUP, :end], attention_mask[start:start + self.GROUP, :end],
                     left_to_right=True).last_hidden_state
            if out is None:
                out = g.new_zeros(B, L, g.shape[-1])
            out[start:start + self.GROUP, :end] = g
        return _with_mems(self.output(out, None, None), [])

    def left_to_right(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                      token_type_ids: Tensor | None = None, mems: list[Tensor] | None = None) -> ModelOutput:
        """The query stream at every position under the left-to-right order: last_hidden_state[:, i] predicts
        token i from the tokens before it (and the memory), so the sum of log p over a sentence is its exact
        log-likelihood, in one pass. ModelOutput.mems carries the memory on to the next segment."""
        return self(input_ids, attention_mask, token_type_ids=token_type_ids, mems=mems, left_to_right=True,
                    keep_memory=True)

    def from_others(self, input_ids: Tensor, attention_mask: Tensor | None = None, *, positions: Tensor,
                    ends: Tensor | None = None) -> ModelOutput:
        """Pseudo-log-likelihood, one query per row: the query stream at positions (B,), with tokens
        [positions, ends) (default: that one token) hidden from every stream, so row b predicts its token from all
        the others. One pass per scored token: unlike T-TA, XLNet's content streams read each other, and in
        layer 2 every other token's content state would already hold the target (docs/guides/scoring.md)."""
        return self(input_ids, attention_mask, hide_positions=positions, hide_ends=ends)

    def with_perm_mask(self, input_ids: Tensor, perm_mask: Tensor | None = None,
                       target_mapping: Tensor | None = None, attention_mask: Tensor | None = None,
                       token_type_ids: Tensor | None = None, mems: list[Tensor] | None = None
                       ) -> tuple[Tensor, Tensor | None, list[Tensor]]:
        """HuggingFace XLNet's interface: perm_mask (B, L, L), 1.0 = may NOT attend (converted here, once, by
        masks.from_perm_mask); target_mapping (B, T, L) one-hot rows: where the query stream runs. Returns the
        content stream (B, L, H), the query stream (B, T, H) or None, and the memory. Unlike HuggingFace, a query
        with nothing to attend to gets a zero attention output."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        B, L = input_ids.shape
        may = torch.ones(B, L, L, dtype=torch.bool, device=input_ids.device)
        if perm_mask is not None:
            if perm_mask.shape != (B, L, L):
                raise ValueError(f"perm_mask must be {(B, L, L)}, got {tuple(perm_mask.shape)}")
            may = from_perm_mask(perm_mask)
        positions = None
        if target_mapping is not None:
            if target_mapping.dim() != 3 or target_mapping.shape[0] != B or target_mapping.shape[2] != L:
                raise ValueError(f"target_mapping must be ({B}, num_predict, {L}), got {tuple(target_mapping.shape)}")
            if not bool((target_mapping.sum(-1) == 1).all()) or not bool(((target_mapping == 0) |
                                                                          (target_mapping == 1)).all()):
                raise ValueError("every row of target_mapping must be one-hot (one position per prediction)")
            positions = target_mapping.argmax(-1)
        h, g, new_mems, _ = self.streams(input_ids, attention_mask, may_see_matrix(may), positions, token_type_ids,
                                         mems, keep_memory=True)
        return h, g, new_mems

    def training_batch(self, input_ids: Tensor, attention_mask: Tensor,
                       generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """A random factorization order per sequence (padding last), its partial-prediction targets and their
        labels (aligned with target_positions)."""
        noise = torch.rand(input_ids.shape, generator=generator).to(input_ids.device)
        order = noise.masked_fill(~attention_mask.bool(), 2.0).argsort(dim=1)
        positions, valid = partial_targets(order.argsort(dim=1), attention_mask, self.config.xlnet.partial_prediction)
        labels = input_ids.gather(1, positions).masked_fill(~valid, IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "order": order,
                "target_positions": positions, "labels": labels}


def _with_mems(out: ModelOutput, mems: list[Tensor], keep: int | None = None) -> ModelOutput:
    """`out` with its memory for the next segment, cut to the last `keep` tokens when given."""
    out.mems = [m[:, -keep:] for m in mems] if keep else mems
    return out


def may_see_matrix(may: Tensor) -> MaskMod:
    """A (B, L, L) boolean matrix, True = query i may see key j, as a mask function."""
    return lambda b, h, q, kv: may[b, q, kv]


def _strictly_before() -> MaskMod:
    """Left to right for the query stream: position i sees the tokens before it, not itself."""
    return lambda b, h, q, kv: kv < q


def _rows(dead: Tensor | None, start: int) -> Tensor | None:
    return None if dead is None else dead[:, :, start:]


def boundaries_first_order(attention_mask: Tensor) -> Tensor:
    """XLNet factorization orders (B, L) for right-padded rows [SOS] p1 .. pn [EOS]: [SOS], [EOS], p1, .., pn,
    then the padding. Under it the query stream at p_i reads [SOS], [EOS] and p_1..p_(i-1): the pieces' exact
    log-likelihood given the sentence's boundaries (and so its length)."""
    n = attention_mask.long().sum(1, keepdim=True)  # [EOS] sits at n - 1
    pos = torch.arange(attention_mask.shape[1], device=attention_mask.device)[None, :]
    return torch.where(pos == 0, 0, torch.where(pos == 1, n - 1, torch.where(pos < n, pos - 1, pos)))


def boundaries_first_view(attention_mask: Tensor) -> dict[str, Tensor]:
    """forward()'s arguments for method causal-boundaries: the order boundaries_first_order, the query stream at
    every position."""
    everywhere = torch.arange(attention_mask.shape[1], device=attention_mask.device).expand(attention_mask.shape)
    return {"order": boundaries_first_order(attention_mask), "target_positions": everywhere}
