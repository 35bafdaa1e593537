"""The one Transformer core every family shares: embeddings and blocks (post-LN by default), numerically the same as
HuggingFace BERT (and, with positions = "transformer-xl" and no attention biases, as HuggingFace XLNet's layers).
A block takes its queries from one stream and its keys/values from another when asked: T-TA queries a [MASK]
stream against the embedding output (Encoder, `kv`); XLNet runs its content and query streams through the same
blocks, both reading keys/values projected from the content stream (families/xlnet.py drives that loop).
The attention layers live in the attention package (attention/select.py picks one); what a pass hands every block is
one attention.inputs.PassInputs, built once per pass."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .attention.dense import fused_linear, guard_empty_rows
from .attention.inputs import PassInputs
from .attention.long_attention import BandedMask, LongAttention
from .attention.packing import Packing
from .attention.reformer import ReversibleBlock, ReversibleSequence
from .attention.select import make_attention
from .cache import KVCache
from .denseformer import DepthWeights
from .dropout import Dropout
from .feedforward import make_feedforward
from .norms import deepnorm_alpha, make_norm
from .pass_modes import Cached, LastLayerRows, Packed, PassMode, WithMemory
from .positions import IN_ATTENTION, Disentangled, Frame, PassPositions, PositionScheme, relative_frame, sinusoidal_embedding
from .regional import compiled_parts, for_layer

T = TypeVar("T")


class Embeddings(nn.Module):
    """LayerNorm(token + learned position [+ segment]) then dropout, as BERT and T-TA have it; the position is
    a fixed sinusoid table with positions = "sinusoidal", and absent where positions act inside attention."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        width = config.embedding_width  # the hidden size unless embedding_size says otherwise
        self.word = nn.Embedding(config.vocab_size, width)
        # absolute positions only where the config's scheme has them (positions.py)
        self.position = nn.Embedding(config.max_position, width) if config.positions == "learned" else None
        # a buffer, not a parameter: fixed, and not saved (it is rebuilt from the config)
        self.fixed_position: Tensor | None
        self.register_buffer("fixed_position", sinusoidal_embedding(config) if config.positions == "sinusoidal"
                             else None, persistent=False)
        self.segment = nn.Embedding(config.type_vocab_size, width) if config.type_vocab_size else None
        self.norm = make_norm(config, width) if config.embedding_norm else None  # GPT-2, LLaMA, ...: none
        self.dropout = Dropout(config.hidden_dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                dropout: nn.Module | None = None, positions: Tensor | None = None) -> Tensor:
        """`dropout` lets a second stream (T-TA's queries) share the LayerNorm but keep its own dropout.
        `positions` (B, L): each token's absolute position (default 0..L-1): tokens appended to a key/value
        cache sit after the cached ones, and a left-padded row counts from its first real token."""
        if self.position is None:
            x = self.word(input_ids)
            if self.fixed_position is not None:  # in the activations' dtype: bf16 runs cast parameters, not buffers
                table = self.fixed_position[:input_ids.shape[1]] if positions is None else self.fixed_position[positions]
                x = x + table.to(x.dtype)
        elif positions is None:
            x = self.word(input_ids) + self.position.weight[:input_ids.shape[1]]
        else:
            x = self.word(input_ids) + self.position(positions)
        if self.segment is not None:
            if token_type_ids is None:
                x = x + self.segment.weight[0]
            else:
                x = x + self.segment(token_type_ids)
        return (dropout or self.dropout)(x if self.norm is None else self.norm(x))


class Block(nn.Module):
    """One Transformer block. Where its norms sit (config.norm_placement; norms.py) is data, not a subclass:
    - post (BERT): h = LN(h + Drop(Attn(h))); h = LN(h + Drop(FFN(h))).
    - deepnorm: the same with alpha h in the residual, alpha = (2N)^(1/4).
    - pre: h = h + Drop(Attn(LN(h))); h = h + Drop(FFN(LN(h))). `inputs.kv`, when given, is the same residual stream
      at other positions (PLL's last-layer rows), so it is normalised like h; keys/values already projected (T-TA's,
      from the embedding output, itself normalised) are used as they are.
    - pre with parallel_residual (GPT-NeoX): h = Drop(FFN(LN2(h))) + Drop(Attn(LN1(h))) + h, summed in GPT-NeoX's order.
    `forward(h, inputs, index)`: the pass's inputs (attention.inputs.PassInputs) and the layer's index."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn = make_attention(config)
        self.attn_norm = make_norm(config)
        self.ffn = make_feedforward(config)  # BERT's FeedForward unless config.ffn says otherwise
        self.ffn_norm = make_norm(config)
        self.dropout = Dropout(config.hidden_dropout)
        self.pre_norm = config.norm_placement == "pre"
        self.alpha = deepnorm_alpha(config.num_layers) if config.norm_placement == "deepnorm" else 1.0
        self.parallel = config.parallel_residual

    def forward(self, h: Tensor, inputs: PassInputs, index: int = 0) -> Tensor:
        if self.parallel:
            return self.parallel_forward(h, inputs, index)
        return self.feed_forward(self.attend(h, inputs, index))

    def parallel_forward(self, h: Tensor, inputs: PassInputs, index: int = 0) -> Tensor:
        """GPT-NeoX's block: attention and feed-forward both read the block's input (parallel_residual)."""
        if inputs.kv is not None:
            inputs = dataclasses.replace(inputs, kv=self.attn_norm(inputs.kv))
        attended = self.dropout(self.attn(self.attn_norm(h), inputs, index))
        return self.dropout(self.ffn(self.ffn_norm(h))) + attended + h

    def attend(self, h: Tensor, inputs: PassInputs, index: int = 0) -> Tensor:
        """The first sub-layer, attention with its residual and norm (DenseFormer reads the two apart)."""
        if self.pre_norm:
            return h + self.attention_branch(h, inputs, index)
        # alpha 1 (post-LN) skips the multiplication: the default block does no more work than BERT's
        return self.attn_norm((h if self.alpha == 1.0 else h * self.alpha) + self.dropout(self.attn(h, inputs, index)))

    def feed_forward(self, h: Tensor) -> Tensor:
        """The second sub-layer, the feed-forward with its residual and norm."""
        if self.pre_norm:
            return h + self.ffn_branch(h)
        return self.ffn_norm((h if self.alpha == 1.0 else h * self.alpha) + self.dropout(self.ffn(h)))

    def attention_branch(self, h: Tensor, inputs: PassInputs, index: int = 0) -> Tensor:
        """Pre-LN's attention sub-layer without its residual, Drop(Attn(LN(h))): F of a reversible block."""
        if inputs.kv is not None:
            inputs = dataclasses.replace(inputs, kv=self.attn_norm(inputs.kv))
        return self.dropout(self.attn(self.attn_norm(h), inputs, index))

    def ffn_branch(self, h: Tensor) -> Tensor:
        """Pre-LN's feed-forward sub-layer without its residual, Drop(FFN(LN(h))): G of a reversible block."""
        return self.dropout(self.ffn(self.ffn_norm(h)))


class _Branch(nn.Module):
    """One residual branch of a reversible block: `run(x)`, its parameters those of `modules` (what
    ReversibleSequence returns gradients for)."""

    def __init__(self, run: Callable[[Tensor], Tensor], *modules: nn.Module) -> None:
        super().__init__()
        self.run = run
        self.parts = nn.ModuleList(modules)

    def forward(self, x: Tensor) -> Tensor:
        return self.run(x)


def _stand_ins(value: T, pairs: dict[int, tuple[Tensor, Tensor]]) -> T:
    """`value` (a pass's inputs) with every non-leaf tensor needing a gradient replaced by a detached leaf (one per
    tensor, however often it appears: shared layers repeat their keys/values), pairs[id(tensor)] = (tensor, leaf);
    the parameters a module in it holds (a BandedMask's position scheme, whose bias is built inside attention) are
    their own stand-ins. These are what a reversible stack reads besides its input (a T5 bias folded into the mask,
    disentangled positions' table, T-TA's projected keys/values), and what its backward pass hands gradients to."""
    if isinstance(value, Tensor):
        if not value.requires_grad:
            return value
        if id(value) not in pairs:
            pairs[id(value)] = (value, value if value.is_leaf else value.detach().requires_grad_(True))
        return pairs[id(value)][1]  # type: ignore[return-value]
    if isinstance(value, nn.Module):
        pairs.update((id(p), (p, p)) for p in value.parameters() if p.requires_grad)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_stand_ins(item, pairs) for item in value)  # type: ignore[return-value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _stand_ins(old, pairs)
            if new is not old:
                changed[f.name] = new
        return dataclasses.replace(value, **changed) if changed else value  # type: ignore[return-value]
    return value


class SharedLayers(nn.Module):
    """ALBERT's cross-layer sharing (Lan et al. 2020): one block applied `depth` times. Indexing, len() and iteration
    see `depth` layers (what Encoder, XLNet's loop and the key/value cache, which keeps one entry per depth, expect);
    the block is registered once, as `0`, so its weights are saved (encoder.layers.0.*), counted, cast to bf16
    and decayed once, and its gradient is the sum over the depths."""

    def __init__(self, block: nn.Module, depth: int) -> None:
        super().__init__()
        self.add_module("0", block)
        self.depth = depth

    def __len__(self) -> int:
        return self.depth

    def __getitem__(self, index: int) -> nn.Module:
        if not -self.depth <= index < self.depth:
            raise IndexError(f"layer {index} of {self.depth}")
        return self._modules["0"]

    def __iter__(self):  # noqa: ANN204
        return iter([self._modules["0"]] * self.depth)


class Encoder(nn.Module):
    def __init__(self, config: ModelConfig, causal: bool = False) -> None:
        super().__init__()
        self.shared = config.share_layers
        if self.shared:
            self.layers: nn.Module = SharedLayers(Block(config), config.num_layers)
        else:
            self.layers = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        # pre-LN leaves the last block's output unnormalised: one more norm, as GPT-2's ln_f
        self.final_norm = make_norm(config) if config.norm_placement == "pre" else None
        # rotary, t5 and alibi: position terms built once per pass for every layer (T5's bucket table lives here,
        # shared by the layers as in T5)
        self.positions = PositionScheme(config, causal) if config.positions in IN_ATTENTION else None
        # whether the layers read a PassPositions: rotary, and attention kinds that read positions (synthesizers)
        self.attention_kind = config.attention
        self.lsra = config.attention == "lsra"  # its branches read their own halves of T-TA's kv, unprojected
        self.pass_positions = self.positions is not None or config.attention != "dot" or config.long.adaptive_span
        self.long = LongAttention(config) if config.long.enabled else None  # [model.long]: attention/long_attention.py
        # positions = "disentangled": the relative embeddings every layer projects (positions.Disentangled)
        self.relative = Disentangled(config) if config.positions == "disentangled" else None
        self.pass_positions = self.pass_positions or self.relative is not None
        self.dense = DepthWeights(2 * config.num_layers) if config.denseformer else None  # DenseFormer
        self.reversible = config.reversible  # RevNet's two halves (_run_reversible)
        # positions = "transformer-xl" on one stream (GPT): the pass's positions.Frame, whose sinusoid every layer
        # projects with its own W_r, u and v; the table dropped out as Transformer-XL drops pos_emb (XLNet, two
        # streams, builds its own frame and never reads this)
        self.frame_dropout = Dropout(config.hidden_dropout) if config.positions == "transformer-xl" else None
        self.width = config.hidden_size
        # whether a pass's mask_kind can reach SDPA (dense.sdpa_known): not past a disentangled or Transformer-XL
        # score term, a window or a synthesizer; where it cannot, the family need not ask (masks.sdpa_kind reads the
        # mask back: a sync on a GPU, a graph break under torch.compile)
        self.reads_mask_kind = (self.relative is None and self.frame_dropout is None and self.long is None
                                and not config.attention.startswith("synthesizer"))
        # a torch.compile backend while the blocks run through one compiled code (regional.compiled_blocks), else None
        self.regional: str | None = None

    def forward(self, h: Tensor, mask: Tensor, kv: Tensor | None = None, output_hidden_states: bool = False,
                mode: PassMode | None = None, mask_kind: str | None = None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """`mask` is a (B, 1, Lq, Lk) bool tensor, True = may attend, built once per batch; `mask_kind` what the
        family knows of it (masks.sdpa_kind; kept only where nothing here changes the mask). `kv`, when given,
        is the key/value source of every layer (T-TA's embedding output); each layer projects it with its own
        weights, all layers in one matmul.

        `mode` (pass_modes.py), at most one: Packed (the real tokens only), LastLayerRows (the last block at one
        position per row, output (B, 1, H)), Cached (new tokens against a key/value cache; no `kv`) or WithMemory
        (Transformer-XL memory before the segment); None: every layer at every position.

        Positions acting inside attention (rotary, t5, alibi; self.positions) are those of the columns, 0..L-1,
        as the embeddings' absolute positions are; with a cache, each token's absolute position as the cache
        records it (cached keys included). positions = "transformer-xl" (GPT) hands every layer the pass's Frame over
        the same positions, and runs on the padded layout (no packing). Under memory, positions run M..M + L - 1
        for the queries, 0..M + L - 1 for the keys."""
        if isinstance(mode, WithMemory) and mode.length:
            return self._run_with_memory(h, mask, mode.memory, output_hidden_states)
        cache = mode.cache if isinstance(mode, Cached) else None
        rows = mode if isinstance(mode, LastLayerRows) else None
        if self.long is not None:
            mask = self._long_mask(mask, cache, banded_ok=mode is None or isinstance(mode, (Packed, WithMemory)))
            if isinstance(mask, BandedMask):  # every layer through the banded kernel, on the padded layout
                inputs = PassInputs(mask, keys_values=self._project_keys_values(kv) or None,
                                    positions=mask.pass_positions(h.dtype))
                return self._run(h, inputs, output_hidden_states)
        # a static cache's rows always have a real key, and its step must not branch on values (cache.py)
        mask, dead = (mask, None) if cache is not None and cache.static else guard_empty_rows(mask)
        if cache is not None and kv is not None:
            raise ValueError("a key/value cache runs self-attention over every new token: not with kv")
        if rows is not None:
            rows.check(h.shape[0], mask.shape[-2])
        positions = frame = None
        if cache is not None:
            if self.pass_positions or self.frame_dropout is not None:
                queries, keys = cache.position_columns()
                frame = self._frame(queries, keys)
                if self.pass_positions:
                    mask, positions = self._pass_positions(mask, queries, keys, h.dtype, cached=True)
            return self._run(h, PassInputs(mask, dead, cache=cache, positions=positions, frame=frame),
                             output_hidden_states)
        columns = torch.arange(mask.shape[-1], device=h.device)[None]
        if self.pass_positions:
            mask, positions = self._pass_positions(mask, columns, columns, h.dtype)
        frame = self._frame(columns, columns)
        if self.long is not None or mask.dtype != torch.bool:  # a window or a position bias in the mask
            mask_kind = None
        packing = None
        if isinstance(mode, Packed) and frame is None:  # relative-position attention runs on the padded layout
            packing = Packing(mode.tokens)
            h, kv = packing.pack(h), None if kv is None else packing.pack(kv)  # the real tokens only
        inputs = PassInputs(mask, dead, keys_values=self._project_keys_values(kv) or None, packing=packing,
                            positions=positions, frame=frame, mask_kind=mask_kind)
        return self._run(h, inputs, output_hidden_states, rows)

    def _run(self, h: Tensor, inputs: PassInputs, output_hidden_states: bool,
             rows: LastLayerRows | None = None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """Every layer on the pass's inputs; with `rows`, the last one at those rows only."""
        packing = inputs.packing
        states = [h if packing is None else packing.pad(h)] if output_hidden_states else None
        last = len(self.layers) - 1 if rows is not None else -1
        if self.dense is not None:
            return self._run_dense(h, inputs, states, last, rows)
        if self.reversible:
            return self._run_reversible(h, inputs, states, rows)
        for index, layer in enumerate(self.layers):
            if index == last:
                h = layer(*self._rows(h, inputs, rows.positions), index)
            else:
                h = self._block("forward", layer, h, inputs, index)
            if states is not None:
                states.append(h if packing is None else packing.pad(h))
        return self._finish(h, states, packing)

    def _run_dense(self, h: Tensor, inputs: PassInputs, states: list[Tensor] | None, last: int,
                   rows: LastLayerRows | None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """_run under DenseFormer: the sub-layers one by one, each followed by its depth-weighted average."""
        packing = inputs.packing
        # x_0, then every sub-layer's output; one buffer unless the whole step is traced or PLL's rows re-gather them
        stream = self.dense.stream(h, buffered=rows is None and not torch.compiler.is_compiling())
        for index, layer in enumerate(self.layers):
            layer_inputs = inputs
            if index == last:
                h, layer_inputs = self._rows(h, inputs, rows.positions)
                stream.rows((torch.arange(h.shape[0], device=h.device), rows.positions))
            h = stream.add(self._block("attend", layer, h, layer_inputs, index))
            h = stream.add(compiled_parts(self.regional)["feed_forward"](layer, h) if self.regional
                           else layer.feed_forward(h))
            if states is not None:
                states.append(h if packing is None else packing.pad(h))
        return self._finish(h, states, packing)

    def _block(self, part: str, layer: nn.Module, h: Tensor, inputs: PassInputs, index: int) -> Tensor:
        """layer.<part>(h, inputs, index) ("forward": the block's call); while `regional` is on, through the compiled
        code every block shares (nn/regional.py), unless the pass has a key/value cache."""
        if self.regional and inputs.cache is None:
            return compiled_parts(self.regional)[part](layer, h, for_layer(inputs, index))
        return layer(h, inputs, index) if part == "forward" else getattr(layer, part)(h, inputs, index)

    def _run_with_memory(self, h: Tensor, mask: Tensor, memory: Sequence[Tensor],
                         output_hidden_states: bool) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """Every layer reading keys/values from [its memory; its input] (forward's `memory`)."""
        if self.long is not None or self.dense is not None or self.reversible or self.attention_kind != "dot" \
                or self.relative is not None:
            raise ValueError("memory runs plain q . k attention layers: not with model.long, denseformer, reversible, "
                             "another attention kind or disentangled positions")
        M, L = memory[0].shape[1], h.shape[1]
        if len(memory) != len(self.layers) or mask.shape[-1] != M + L:
            raise ValueError(f"memory: one tensor per layer ({len(self.layers)}, got {len(memory)}) and a mask over "
                             f"memory + segment keys ({M + L}, got {mask.shape[-1]})")
        mask, dead = guard_empty_rows(mask)
        positions = None
        keys = torch.arange(M + L, device=h.device)[None]
        if self.pass_positions:
            mask, positions = self._pass_positions(mask, keys[:, M:], keys, h.dtype)
        inputs = PassInputs(mask, dead, positions=positions, frame=self._frame(keys[:, M:], keys))
        states = [h] if output_hidden_states else None
        for index, layer in enumerate(self.layers):
            kv = torch.cat([memory[index].to(h.dtype), h], dim=1)
            h = layer(h, dataclasses.replace(inputs, kv=kv), index)
            if states is not None:
                states.append(h)
        return self._finish(h, states)

    def _run_reversible(self, h: Tensor, inputs: PassInputs, states: list[Tensor] | None,
                        rows: LastLayerRows | None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """_run under reversible = true (RevNet, as Reformer uses it): two halves that both start as h, through
        y1 = x1 + F(x2), y2 = x2 + G(y1) per block (F, G: the pre-LN sub-layers without their residuals); the
        output, and each hidden state, is their mean. With gradients on, ReversibleSequence keeps no block's
        activations and rebuilds them in the backward pass; hidden states, a cache or no gradient run the same
        blocks plainly. `rows`: every layer runs at every position, and those rows are read at the end."""
        packing = inputs.packing
        context: dict[int, tuple[Tensor, Tensor]] = {}
        train = states is None and inputs.cache is None and torch.is_grad_enabled()
        if train:  # the blocks read leaves standing in for the pass's tensors (ReversibleSequence's context)
            inputs = _stand_ins(inputs, context)
        blocks = [ReversibleBlock(_Branch(functools.partial(layer.attention_branch, inputs=inputs, index=index),
                                          layer.attn, layer.attn_norm),
                                  _Branch(layer.ffn_branch, layer.ffn, layer.ffn_norm))
                  for index, layer in enumerate(self.layers)]
        x1 = x2 = h
        if train:
            x1, x2 = ReversibleSequence(blocks)(x1, x2, context=list(context.values()))
        else:
            for block in blocks:
                x1, x2 = block(x1, x2)
                if states is not None:
                    states.append((x1 + x2) / 2 if packing is None else packing.pad((x1 + x2) / 2))
        h = (x1 + x2) / 2
        if rows is not None:
            h = h[torch.arange(h.shape[0], device=h.device), rows.positions][:, None]
        return self._finish(h, states, packing)

    @staticmethod
    def _rows(h: Tensor, inputs: PassInputs, at_rows: Tensor) -> tuple[Tensor, PassInputs]:
        """The last layer's input at one query per row, (B, 1, H), and the pass's inputs cut to those rows; its
        keys/values come from every position of `h` (or are those projected from the pass's kv)."""
        B = h.shape[0]
        rows = torch.arange(B, device=h.device)
        at = (rows, slice(None), at_rows)  # -> (B, 1, Lk): that query's row of the mask
        dead = inputs.dead_rows
        cut = PassInputs(inputs.mask.expand(B, -1, -1, -1)[at][:, :, None],
                         None if dead is None else dead.expand(B, -1, -1, -1)[at][:, :, None],
                         kv=h if inputs.keys_values is None else None, keys_values=inputs.keys_values,
                         positions=None if inputs.positions is None else inputs.positions.rows(at_rows),
                         frame=None if inputs.frame is None else
                         Frame(inputs.frame.table, inputs.frame.index.expand(B, -1, -1, -1)[at][:, :, None]))
        return h[rows, at_rows][:, None], cut

    def _long_mask(self, mask: Tensor, cache: KVCache | None, banded_ok: bool) -> Tensor | BandedMask:
        """[model.long]: the window ANDed into the mask, or a BandedMask for a long full pass (`banded_ok`: no cache
        and no last-layer rows; attention/long_attention.py)."""
        if cache is not None:
            queries, keys = cache.position_columns()
        else:
            queries = keys = torch.arange(mask.shape[-1], device=mask.device)[None]
        return self.long.prepare(mask, queries, keys, banded_ok, self.positions)

    def _pass_positions(self, mask: Tensor, queries: Tensor, keys: Tensor, dtype: torch.dtype,
                        cached: bool = False) -> tuple[Tensor, PassPositions]:
        """The mask with any position bias folded in, and the pass's PassPositions. With a cache (`cached`) the
        queries are the new tokens, whose keys alone are projected (and rotated) in this pass."""
        rotary = None
        if self.positions is not None:
            mask, rotary = self.positions.prepare(mask, queries, keys, dtype, new_key_positions=queries if cached else None)
        relative = None if self.relative is None else self.relative.prepare(queries, keys)
        return mask, PassPositions(queries, keys, rotary, relative)

    def _frame(self, queries: Tensor, keys: Tensor) -> Frame | None:
        """positions = "transformer-xl" (one stream): the pass's Frame for the query and key positions, (1 or B, Lq)
        and (1 or B, Lk) integers (memory keys and cached keys at their own positions); None under other schemes."""
        if self.frame_dropout is None:
            return None
        return relative_frame(queries, keys, self.width, dropout=self.frame_dropout)

    def _finish(self, h: Tensor, states: list[Tensor] | None,
                packing: Packing | None = None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """The encoder's output and hidden states; under pre-LN the last one through the final norm."""
        if self.final_norm is not None:
            h = self.final_norm(h)
            if states is not None:
                states[-1] = h if packing is None else packing.pad(h)
        return (h if packing is None else packing.pad(h)), tuple(states) if states is not None else None

    def _project_keys_values(self, kv: Tensor | None) -> list[tuple[Tensor | None, Tensor]]:
        """Every layer's (keys, values) from `kv`, in one matmul; none without `kv`. A layer without keys (a
        synthesizer) gets None for them; a shared block (share_layers) is projected once for every layer."""
        if kv is None:
            return []
        if self.lsra:
            return [(None, kv)] * len(self.layers)
        layers = [self.layers[0]] if self.shared else list(self.layers)
        out = iter(fused_linear(kv, *[m for layer in layers for m in (layer.attn.key, layer.attn.value) if m is not None]))
        pairs = [(None if layer.attn.key is None else next(out), next(out)) for layer in layers]
        return pairs * len(self.layers) if self.shared else pairs
