"""The one Transformer core every family shares: embeddings and post-LN blocks, numerically the same as
HuggingFace BERT (and, with positions = "transformer-xl" and no attention biases, as HuggingFace XLNet's layers).
A block takes its queries from one stream and its keys/values from another when asked: T-TA queries a [MASK]
stream against the embedding output (Encoder, `kv`); XLNet runs its content and query streams through the same
blocks, both reading keys/values projected from the content stream (families/xlnet.py drives that loop)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention.adaptive_span import AdaptiveSpan
from .attention.long import BandedMask, LongAttention, span_mask
from .attention.variants import Synthesizer, TalkingHeads
from .cache import KVCache, LayerCache
from .config import ModelConfig
from .dropout import Dropout, dropout
from .feedforward import make_feedforward
from .norms import deepnorm_alpha, make_norm
from .positions import (
    IN_ATTENTION,
    Frame,
    PassPositions,
    PositionScheme,
    RelativePositions,
    attend_with_term,
    sinusoidal_embedding,
)
from .quant import Int8Linear, concatenated_int8


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
        self.norm = make_norm(config, width)
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
        return (dropout or self.dropout)(self.norm(x))


class Attention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h = config.hidden_size
        bias = bool(config.attention_bias)
        self.num_heads = config.num_heads
        keys = config.num_heads * config.key_width  # hidden_size unless key_size decouples it from the values'
        # a synthesizer makes its logits without queries and keys (attention_variants.py)
        self.synthesizer = Synthesizer(config) if config.attention != "dot" else None
        self.query = nn.Linear(h, keys, bias=bias) if self.synthesizer is None else None
        self.key = nn.Linear(h, keys, bias=bias) if self.synthesizer is None else None
        self.value = nn.Linear(h, h, bias=bias)
        self.out = nn.Linear(h, h, bias=bias)
        self.dropout_p = config.attention_dropout
        # the layer's own relative-position weights, where positions enter attention rather than the embeddings
        self.relative = RelativePositions(config) if config.positions == "transformer-xl" else None
        # an attention kind with its own softmax (attention_variants.py); None = SDPA
        self.kernel = TalkingHeads(config.num_heads) if config.talking_heads else None
        # a learned soft span per head (adaptive span, [model.long]; long_attention.py)
        long = config.long
        self.span = AdaptiveSpan(config.num_heads, long.max_span, long.span_ramp, long.span_init) \
            if long.adaptive_span else None

    def forward(self, h: Tensor, mask: Tensor, dead_rows: Tensor | None, kv: Tensor | None = None,
                keys_values: tuple[Tensor | None, Tensor] | None = None, packing: Packing | None = None,
                cache: LayerCache | None = None, frame: Frame | None = None,
                positions: PassPositions | None = None) -> Tensor:
        """Self-attention by default; queries from `h` against keys/values projected from `kv`, or against
        `keys_values` already projected (T-TA projects every layer's from the embedding output in one matmul).
        With `packing`, h, kv and keys_values hold the real tokens only, (N, C). With `cache` (self-attention
        only), the new tokens' keys/values are appended to this layer's cache and the queries attend to all of
        its keys: `mask` is then (B, 1, Lnew, Lcached + Lnew). `frame`: the relative positions of this pass (needed
        exactly when the layer has relative-position weights; not with packing or a cache). `positions`: the pass's
        query/key positions and rotary tables (positions.PassPositions); rotary is applied to q and k before the
        keys enter a cache. `mask` may be a
        float mask (a position bias with -inf where attention is forbidden, positions.PositionScheme.prepare)."""
        if (frame is None) != (self.relative is None):
            raise ValueError("relative-position attention needs a positions.Frame, and only it takes one")
        if self.synthesizer is not None:
            return self._synthesized(h, mask, dead_rows, kv, keys_values, packing, cache, positions)
        # one wide matmul instead of three narrow ones: narrow matmuls waste most of a CPU's bf16 throughput
        if keys_values is not None:
            q, (k, v) = self.query(h), keys_values
        elif kv is None:
            q, k, v = fused_linear(h, self.query, self.key, self.value)
        else:
            q, (k, v) = self.query(h), fused_linear(kv, self.key, self.value)
        if self.span is not None and not isinstance(mask, BandedMask):
            mask, dead_rows = span_mask(self.span, mask, dead_rows, positions, q.dtype)
        if packing is not None:
            if frame is not None:
                raise ValueError("relative-position attention runs on the padded layout, not packed")
            return self.out(packing.attend(q, k, v, mask, dead_rows, self.num_heads, positions, self.kernel))
        B, Lq, _ = q.shape
        nh = self.num_heads
        Lk = k.shape[1]
        q = q.view(B, Lq, nh, -1).transpose(1, 2)
        k = k.view(B, Lk, nh, -1).transpose(1, 2)
        v = v.view(B, Lk, nh, -1).transpose(1, 2)
        if positions is not None and positions.rotary is not None:
            q, k = positions.rotary.apply(q, k)
        if cache is not None:
            k, v = cache.append(k, v)
        if isinstance(mask, BandedMask):  # long_attention.py: the banded kernel
            a = mask.attend(q, k, v, self.span, self.dropout_p if self.training else 0.0)
        elif self.relative is not None:
            q, term = self.relative(q, frame)
            if self.kernel is not None:
                a = self.kernel(q, k, v, term.masked_fill(~mask, float("-inf")), self.dropout_p, self.training)
            else:
                a = attend_with_term(q, k, v, mask, term, self.dropout_p, self.training)
        elif self.kernel is not None:
            a = self.kernel(q, k, v, mask, self.dropout_p, self.training)
        elif self.training and self.dropout_p > 0:
            # what SDPA does with dropout on CPU (its math path), with the cheaper dropout
            scores = (q @ k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5)
            scores = scores.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else scores.add_(mask)
            a = dropout(scores.softmax(dim=-1), self.dropout_p, True) @ v
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if dead_rows is not None:
            a = a.masked_fill(dead_rows, 0.0)
        return self.out(a.transpose(1, 2).reshape(B, Lq, -1))

    def _synthesized(self, h: Tensor, mask: Tensor, dead_rows: Tensor | None, kv: Tensor | None,
                     keys_values: tuple[Tensor | None, Tensor] | None, packing: Packing | None,
                     cache: LayerCache | None, positions: PassPositions | None) -> Tensor:
        """forward() for a synthesizer: values as usual, logits from the synthesizer at the pass's positions."""
        v = keys_values[1] if keys_values is not None else self.value(h if kv is None else kv)
        q = self.synthesizer.features(h)  # dense: F(h), per head; random: None
        if packing is not None:
            return self.out(packing.attend(q, None, v, mask, dead_rows, self.num_heads, positions, self.synthesizer))
        B, Lq, _ = h.shape
        v = v.view(B, v.shape[1], self.num_heads, -1).transpose(1, 2)
        if q is not None:
            q = q.view(B, Lq, self.num_heads, -1).transpose(1, 2)
        if cache is not None:
            _, v = cache.append(None, v)
        a = self.synthesizer(q, None, v, mask, self.dropout_p, self.training, positions)
        if dead_rows is not None:
            a = a.masked_fill(dead_rows, 0.0)
        return self.out(a.transpose(1, 2).reshape(B, Lq, -1))


class FeedForward(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.ffn_bias)
        self.act = nn.GELU()  # a module, so that int8 inference can fold it into `up` (precision.quantize_int8)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.ffn_bias)

    def forward(self, h: Tensor) -> Tensor:
        return self.down(self.act(self.up(h)))

    def linears(self) -> tuple[nn.Module, ...]:
        return self.up, self.down


class Block(nn.Module):
    """Post-LN block: h = LN(h + Drop(Attn(h, kv))); h = LN(h + Drop(FFN(h)))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.attention == "lsra":  # Lite Transformer's attention + convolution (it imports this module)
            from .attention.lsra import LongShortAttention

            self.attn: nn.Module = LongShortAttention(config)
        else:
            self.attn = Attention(config)
        self.attn_norm = make_norm(config)
        self.ffn = make_feedforward(config)  # BERT's FeedForward unless config.ffn says otherwise
        self.ffn_norm = make_norm(config)
        self.dropout = Dropout(config.hidden_dropout)

    def forward(self, h: Tensor, mask: Tensor, kv: Tensor | None = None, dead_rows: Tensor | None = None,
                keys_values: tuple[Tensor | None, Tensor] | None = None, packing: Packing | None = None,
                cache: LayerCache | None = None, frame: Frame | None = None,
                positions: PassPositions | None = None) -> Tensor:
        h = self.attn_norm(h + self.dropout(self.attn(h, mask, dead_rows, kv=kv, keys_values=keys_values,
                                                      packing=packing, cache=cache, frame=frame, positions=positions)))
        return self.ffn_norm(h + self.dropout(self.ffn(h)))


class PreNormBlock(Block):
    """Pre-LN block (norms.py): h = h + Drop(Attn(LN(h), LN(kv))); h = h + Drop(FFN(LN(h))). `kv`, when given, is
    the same residual stream at other positions (PLL's last-layer rows), so it is normalised like h; keys/values
    already projected (T-TA's, from the embedding output, itself normalised) are used as they are."""

    def forward(self, h: Tensor, mask: Tensor, kv: Tensor | None = None, dead_rows: Tensor | None = None,
                keys_values: tuple[Tensor | None, Tensor] | None = None, packing: Packing | None = None,
                cache: LayerCache | None = None, frame: Frame | None = None,
                positions: PassPositions | None = None) -> Tensor:
        h = h + self.dropout(self.attn(self.attn_norm(h), mask, dead_rows, kv=None if kv is None else self.attn_norm(kv),
                                       keys_values=keys_values, packing=packing, cache=cache, frame=frame,
                                       positions=positions))
        return h + self.dropout(self.ffn(self.ffn_norm(h)))


class DeepNormBlock(Block):
    """DeepNorm block (norms.py): h = LN(alpha h + Drop(Attn(h, kv))); h = LN(alpha h + Drop(FFN(h)))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.alpha = deepnorm_alpha(config.num_layers)

    def forward(self, h: Tensor, mask: Tensor, kv: Tensor | None = None, dead_rows: Tensor | None = None,
                keys_values: tuple[Tensor | None, Tensor] | None = None, packing: Packing | None = None,
                cache: LayerCache | None = None, frame: Frame | None = None,
                positions: PassPositions | None = None) -> Tensor:
        h = self.attn_norm(h * self.alpha + self.dropout(self.attn(h, mask, dead_rows, kv=kv, keys_values=keys_values,
                                                                   packing=packing, cache=cache, frame=frame,
                                                                   positions=positions)))
        return self.ffn_norm(h * self.alpha + self.dropout(self.ffn(h)))


BLOCKS = {"post": Block, "pre": PreNormBlock, "deepnorm": DeepNormBlock}


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


class Packing:
    """The real tokens of a padded (B, L) batch. Everything in a block but attention works token by token, so
    it can run on the real tokens alone, (N, H) instead of (B, L, H): sorting by length leaves 16 % of the
    positions padding in batches of 32 WikiText sentences, and those would cost as much as real ones.

    Attention runs on the padded layout, in groups of GROUP rows each cut to its longest row when the batch
    is right-padded: a sorted batch of 32 sentences spans lengths 69 to 39, and attention's cost grows with the
    square of the padded length (a third of it is padding at 32 rows, a tenth at 8)."""

    GROUP = 8

    def __init__(self, tokens: Tensor) -> None:
        self.batch, self.length = tokens.shape
        flat = tokens.reshape(-1)
        self.index = flat.nonzero().squeeze(1)
        # for each padded position, the packed row attention reads there (padding reads row 0)
        source = (flat.long().cumsum(0) - 1).clamp_min(0).masked_fill_(~flat, 0).view(self.batch, self.length)
        lengths = tokens.sum(1)
        positions = torch.arange(self.length, device=tokens.device)
        if bool((tokens == (positions < lengths[:, None])).all()):
            rows = lengths.tolist()
            self.groups = [(start, min(start + self.GROUP, self.batch), max(rows[start:start + self.GROUP]))
                           for start in range(0, self.batch, self.GROUP)]
            self.groups = [group for group in self.groups if group[2] > 0]  # rows of padding only: no work
        else:
            self.groups = [(0, self.batch, self.length)]
        # each group's real tokens in its own (rows, end) grid, and the packed row each of its cells reads
        self.group_index = [tokens[a:b, :end].reshape(-1).nonzero().squeeze(1) for a, b, end in self.groups]
        self.group_source = [source[a:b, :end].reshape(-1) for a, b, end in self.groups]

    def pack(self, x: Tensor) -> Tensor:
        """(B, L, C) -> (N, C), the real tokens in row-major order."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self.index)

    def pad(self, x: Tensor) -> Tensor:
        """(N, C) -> (B, L, C), zeros at the padding: for outputs."""
        out = x.new_zeros(self.batch * self.length, x.shape[-1])
        return out.index_copy_(0, self.index, x).view(self.batch, self.length, -1)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dead_rows: Tensor | None, heads: int,
               positions: PassPositions | None = None, kernel: nn.Module | None = None) -> Tensor:
        """SDPA group by group, q, k and v packed (N, C); the real tokens' outputs, (N, H). A float mask (a
        position bias) is cut like a boolean one; positions (and rotary tables) by column, a group's columns being
        positions 0..end-1 as in the padded layout. `kernel`: an attention kind of attention_variants.py instead of SDPA."""
        out = []
        for group, (a, b, end) in enumerate(self.groups):
            q_, k_, v_ = (None if x is None else self._cut(x, group, heads) for x in (q, k, v))
            cut = None if positions is None else positions.cut(end)
            if cut is not None and cut.rotary is not None:
                q_, k_ = cut.rotary.apply(q_, k_)
            if kernel is not None:
                o = kernel(q_, k_, v_, mask[a:b, :, :end, :end], positions=cut)
            else:
                o = F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask[a:b, :, :end, :end])
            if dead_rows is not None:
                o = o.masked_fill(dead_rows[a:b, :, :end], 0.0)
            out.append(o.transpose(1, 2).reshape((b - a) * end, -1).index_select(0, self.group_index[group]))
        return torch.cat(out) if len(out) > 1 else out[0]

    def _cut(self, x: Tensor, group: int, heads: int) -> Tensor:
        """(N, C) packed -> (rows, heads, end, C / heads): one group's cut of the padded layout, in one gather
        (the padding reads a real row, which no query may attend to as a key and whose output is dropped)."""
        a, b, end = self.groups[group]
        return x.index_select(0, self.group_source[group]).view(b - a, end, heads, -1).transpose(1, 2)


def fused_linear(x: Tensor, *layers: nn.Linear) -> tuple[Tensor, ...]:
    """[layer(x) for layer in layers], computed as one matmul (wide_linear) and split."""
    return wide_linear(x, *layers).split([layer.out_features for layer in layers], dim=-1)


def wide_linear(x: Tensor, *layers: nn.Linear) -> Tensor:
    """torch.cat([layer(x) for layer in layers], -1) as one matmul against the concatenated weights (int8
    layers have their own concatenation; other layers run one by one)."""
    if all(isinstance(layer, Int8Linear) for layer in layers):
        return concatenated_int8(x, layers)
    if any(type(layer) is not nn.Linear for layer in layers):
        return torch.cat([layer(x) for layer in layers], dim=-1)
    weight = torch.cat([layer.weight for layer in layers])
    if all(layer.bias is None for layer in layers):
        return F.linear(x, weight)
    bias = torch.cat([layer.bias if layer.bias is not None else layer.weight.new_zeros(layer.out_features)
                      for layer in layers])
    return F.linear(x, weight, bias)


def guard_empty_rows(mask: Tensor) -> tuple[Tensor, Tensor | None]:
    """SDPA returns NaN for a query that may attend to nothing (an XLNet order's first token, a one-token
    T-TA input). Let such rows attend anywhere, and return them so the block zeroes their output."""
    dead = ~mask.any(dim=-1, keepdim=True)
    if not bool(dead.any()):
        return mask, None
    return mask | dead, dead


class Encoder(nn.Module):
    def __init__(self, config: ModelConfig, causal: bool = False) -> None:
        super().__init__()
        block = BLOCKS[config.norm_placement]
        self.shared = config.share_layers
        if self.shared:
            self.layers: nn.Module = SharedLayers(block(config), config.num_layers)
        else:
            self.layers = nn.ModuleList(block(config) for _ in range(config.num_layers))
        # pre-LN leaves the last block's output unnormalised: one more norm, as GPT-2's ln_f
        self.final_norm = make_norm(config) if config.norm_placement == "pre" else None
        # rotary, t5 and alibi: position terms built once per pass for every layer (T5's bucket table lives here,
        # shared by the layers as in T5)
        self.positions = PositionScheme(config, causal) if config.positions in IN_ATTENTION else None
        # whether the layers read a PassPositions: rotary, and attention kinds that read positions (synthesizers)
        self.lsra = config.attention == "lsra"  # its branches read their own halves of T-TA's kv, unprojected
        self.pass_positions = self.positions is not None or config.attention != "dot" or config.long.adaptive_span
        self.long = LongAttention(config) if config.long.enabled else None  # [model.long]: long_attention.py

    def forward(self, h: Tensor, mask: Tensor, kv: Tensor | None = None, output_hidden_states: bool = False,
                query_positions: Tensor | None = None, tokens: Tensor | None = None,
                cache: KVCache | None = None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """`mask` is a (B, 1, Lq, Lk) bool tensor, True = may attend, built once per batch. `kv`, when given,
        is the key/value source of every layer (T-TA's embedding output); each layer projects it with its own
        weights, all layers in one matmul.

        `query_positions` (B,) runs the last block at one position per row only, its output then (B, 1, H):
        PLL reads one masked position per copy, and the last block's queries, attention output and FFN are
        needed nowhere else (its keys and values still come from every position of the block below).

        `tokens` (B, L) bool, the real tokens: every layer but attention then runs on those alone (see
        Packing), and the outputs, hidden states included, are zero at the other positions. Not with
        query_positions.

        `cache` (inference, self-attention): `h` holds the new tokens only, (B, Lnew, H); each layer appends
        their keys/values to the cache (whose cache.extend reserved their slots and made `mask`, (B, 1, Lnew,
        Lcached + Lnew)) and attends to everything cached. Not with kv, query_positions or tokens.

        Positions acting inside attention (rotary, t5, alibi; self.positions) are those of the columns, 0..L-1,
        as the embeddings' absolute positions are; with a cache, each token's absolute position as the cache
        records it (cached keys included)."""
        if self.long is not None:
            mask = self._long_mask(mask, cache, query_positions)
            if isinstance(mask, BandedMask):
                return self._banded(h, mask, kv, output_hidden_states)
        mask, dead = guard_empty_rows(mask)
        B = h.shape[0]
        positions = None
        if cache is not None:
            if kv is not None or query_positions is not None or tokens is not None:
                raise ValueError("a key/value cache runs self-attention over every new token: not with kv, "
                                 "query_positions or tokens")
            if self.pass_positions:
                keys = cache.key_positions[:, :cache.length]
                mask, positions = self._pass_positions(mask, keys[:, cache.start:], keys, h.dtype, cached=True)
            states = [h] if output_hidden_states else None
            for index, layer in enumerate(self.layers):
                h = layer(h, mask, dead_rows=dead, cache=cache.layer(index), positions=positions)
                if states is not None:
                    states.append(h)
            return self._finish(h, states)
        if query_positions is not None:
            L = mask.shape[-2]
            if query_positions.shape != (B,) or bool(((query_positions < 0) | (query_positions >= L)).any()):
                raise ValueError(f"query_positions must be a ({B},) tensor of positions in [0, {L}), "
                                 f"got shape {tuple(query_positions.shape)}")
        if tokens is not None:
            if query_positions is not None:
                raise ValueError("tokens (packing) and query_positions cannot be combined")
        if self.pass_positions:
            columns = torch.arange(mask.shape[-1], device=h.device)[None]
            mask, positions = self._pass_positions(mask, columns, columns, h.dtype)
        if tokens is not None:
            return self._packed(h, mask, dead, kv, output_hidden_states, Packing(tokens), positions)
        states = [h] if output_hidden_states else None
        projected = self._project_keys_values(kv)
        for index, layer in enumerate(self.layers):
            keys_values = projected[index] if projected else None
            if query_positions is not None and index == len(self.layers) - 1:
                rows = torch.arange(B, device=h.device)
                at = (rows, slice(None), query_positions)  # -> (B, 1, Lk): that query's row of the mask
                h = layer(h[rows, query_positions][:, None], mask.expand(B, -1, -1, -1)[at][:, :, None],
                          kv=h if keys_values is None else None, keys_values=keys_values,
                          dead_rows=None if dead is None else dead.expand(B, -1, -1, -1)[at][:, :, None],
                          positions=None if positions is None else positions.rows(query_positions))
            else:
                h = layer(h, mask, dead_rows=dead, keys_values=keys_values, positions=positions)
            if states is not None:
                states.append(h)
        return self._finish(h, states)

    def _long_mask(self, mask: Tensor, cache: KVCache | None, query_positions: Tensor | None) -> Tensor | BandedMask:
        """[model.long]: the window ANDed into the mask, or a BandedMask for a long full pass (long_attention.py)."""
        if cache is not None:
            keys = cache.key_positions[:, :cache.length]
            queries = keys[:, cache.start:]
        else:
            queries = keys = torch.arange(mask.shape[-1], device=mask.device)[None]
        return self.long.prepare(mask, queries, keys, cache is None and query_positions is None, self.positions)

    def _banded(self, h: Tensor, band: BandedMask, kv: Tensor | None,
                output_hidden_states: bool) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """Every layer through the banded kernel (long_attention.BandedMask), on the padded layout."""
        positions = band.pass_positions(h.dtype)
        states = [h] if output_hidden_states else None
        projected = self._project_keys_values(kv)
        for index, layer in enumerate(self.layers):
            h = layer(h, band, keys_values=projected[index] if projected else None, positions=positions)
            if states is not None:
                states.append(h)
        return self._finish(h, states)

    def _pass_positions(self, mask: Tensor, queries: Tensor, keys: Tensor, dtype: torch.dtype,
                        cached: bool = False) -> tuple[Tensor, PassPositions]:
        """The mask with any position bias folded in, and the pass's PassPositions. With a cache (`cached`) the
        queries are the new tokens, whose keys alone are projected (and rotated) in this pass."""
        rotary = None
        if self.positions is not None:
            mask, rotary = self.positions.prepare(mask, queries, keys, dtype, new_key_positions=queries if cached else None)
        return mask, PassPositions(queries, keys, rotary)

    def _finish(self, h: Tensor, states: list[Tensor] | None,
                packing: Packing | None = None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """The encoder's output and hidden states; under pre-LN the last one through the final norm."""
        if self.final_norm is not None:
            h = self.final_norm(h)
            if states is not None:
                states[-1] = h if packing is None else packing.pad(h)
        return (h if packing is None else packing.pad(h)), tuple(states) if states is not None else None

    def _packed(self, h: Tensor, mask: Tensor, dead: Tensor | None, kv: Tensor | None, output_hidden_states: bool,
                packing: Packing, positions: PassPositions | None = None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        h = packing.pack(h)
        states = [packing.pad(h)] if output_hidden_states else None
        projected = self._project_keys_values(None if kv is None else packing.pack(kv))  # the real tokens only
        for index, layer in enumerate(self.layers):
            keys_values = projected[index] if projected else None
            h = layer(h, mask, dead_rows=dead, keys_values=keys_values, packing=packing, positions=positions)
            if states is not None:
                states.append(packing.pad(h))
        return self._finish(h, states, packing)

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
