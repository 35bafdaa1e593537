"""Multi-head attention over the whole (L x L) mask: dot-product heads through SDPA's fused kernel, or an explicit
softmax where a switch needs one (talking heads, relative positions, dropout while training, the banded kernel of
[model.long]); and the synthesizers' attention, whose logits are not q . k (variants.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...config import ModelConfig
from ...registry import rules
from ...runtime.quant import Int8Linear, concatenated_int8
from ..dropout import dropout
from ..norms import make_norm
from ..positions import RelativePositions, attend_with_term
from . import flex
from .adaptive_span import AdaptiveSpan
from .inputs import PassInputs
from .long_attention import BandedMask, span_mask
from .variants import Synthesizer, TalkingHeads


class Attention(nn.Module):
    """Dot-product heads; `forward(h, inputs, index)` with the pass's inputs (inputs.PassInputs) and the layer's index
    in the encoder (which keys/values and which cache slot are its)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h = config.hidden_size
        bias = bool(config.attention_bias)
        self.num_heads = config.num_heads
        # grouped-query attention (num_kv_heads): fewer key/value heads, each read by `groups` query heads
        self.kv_heads = config.kv_heads
        self.groups = config.num_heads // config.kv_heads
        queries = config.num_heads * config.key_width  # hidden_size unless key_size decouples it from the values'
        keys = self.kv_heads * config.key_width
        # a synthesizer makes its logits without queries and keys (SynthesizedAttention)
        self.synthesizer = Synthesizer(config) if config.attention != "dot" else None
        self.query = nn.Linear(h, queries, bias=bias) if self.synthesizer is None else None
        self.key = nn.Linear(h, keys, bias=bias) if self.synthesizer is None else None
        self.value = nn.Linear(h, self.kv_heads * config.head_dim, bias=bias)
        self.out = nn.Linear(h, h, bias=bias)
        self.dropout_p = config.attention_dropout
        # the layer's own relative-position weights, where positions enter attention rather than the embeddings
        self.relative = RelativePositions(config, segments=rules(config.family).two_streams) \
            if config.positions == "transformer-xl" else None
        # an attention kind with its own softmax (variants.py); None = SDPA
        self.kernel = TalkingHeads(config.num_heads) if config.talking_heads else None
        # a learned soft span per head (adaptive span, [model.long]; long_attention.py)
        long = config.long
        self.span = AdaptiveSpan(config.num_heads, long.max_span, long.span_ramp, long.span_init) \
            if long.adaptive_span else None
        # GPT-BERT's switches on the attention output (docs/guides/switches.md): output x GELU(gate(h)), then a norm, before
        # the output projection
        self.gate = nn.Linear(h, h, bias=bias) if config.value_gate else None
        self.out_norm = make_norm(config) if config.attention_output_norm else None

    def forward(self, h: Tensor, inputs: PassInputs, index: int = 0) -> Tensor:
        """Queries from `h` against keys/values projected from `h` (self-attention), from `inputs.kv`, or taken
        already projected from `inputs.keys_values[index]`. Rotary is applied to q and k before the keys enter a
        cache."""
        frame = inputs.frame
        if (frame is None) != (self.relative is None):
            raise ValueError("relative-position attention needs a positions.Frame, and only it takes one")
        q, k, v = self.project(h, inputs, index)
        mask, dead_rows, positions = inputs.mask, inputs.dead_rows, inputs.positions
        if self.span is not None and not isinstance(mask, BandedMask):
            mask, dead_rows = span_mask(self.span, mask, dead_rows, positions, q.dtype)
        if inputs.packing is not None:
            if frame is not None:
                raise ValueError("relative-position attention runs on the padded layout, not packed")
            if self.groups > 1:
                k, v = repeat_packed(k, self.kv_heads, self.groups), repeat_packed(v, self.kv_heads, self.groups)
            return self.output(inputs.packing.attend(q, k, v, mask, dead_rows, self.num_heads, positions, self.kernel),
                               h)
        B, Lq, _ = q.shape
        q, k, v = split_heads(q, self.num_heads), split_heads(k, self.kv_heads), split_heads(v, self.kv_heads)
        if positions is not None and positions.rotary is not None:
            q, k = positions.rotary.apply(q, k)
        if inputs.cache is not None:
            k, v = inputs.cache.append(index, k, v)  # a cache of key/value heads: 1 / groups of the queries'
        if self.groups > 1:
            k, v = repeat_heads(k, self.groups), repeat_heads(v, self.groups)
        if isinstance(mask, BandedMask):  # long_attention.py: the banded kernel
            a = mask.attend(q, k, v, self.span, self.dropout_p if self.training else 0.0)
        elif self.relative is not None and flex.enabled and self.kernel is None and \
                not (self.training and self.dropout_p > 0):
            # run.flex_attention: Transformer-XL's and XLNet's two streams' terms read inside the kernel
            q, by_distance, seg = self.relative.tables(q, frame)
            a = flex.attend(q, k, v, mask, self.relative.score_terms(by_distance, seg, frame))
        elif self.relative is not None:
            q, term = self.relative(q, frame)
            if self.kernel is not None:
                a = self.kernel(q, k, v, term.masked_fill(~mask, float("-inf")), self.dropout_p, self.training)
            else:
                a = attend_with_term(q, k, v, mask, term, self.dropout_p, self.training)
        elif self.kernel is not None:
            a = self.kernel(q, k, v, mask, self.dropout_p, self.training)
        elif (self.training and self.dropout_p > 0) or getattr(inputs.cache, "static", False) or \
                explicit_pays(q, k):
            # SDPA's math path written out: with dropout (what SDPA does on CPU, with the cheaper dropout), in the
            # static decode step (cache.StaticKVCache), whose one query per row a compiler fuses into a few kernels
            # where the CPU flash kernel spends ~1 ms a call on it (static_decode.py), and in bf16 training on a CPU
            # at short lengths (explicit_pays)
            a = written_out(q, k, v, mask, self.dropout_p if self.training else 0.0)
        else:
            a = sdpa_known(q, k, v, mask, inputs.mask_kind if self.span is None else None)
        if dead_rows is not None:
            a = a.masked_fill(dead_rows, 0.0)
        return self.output(a.transpose(1, 2).reshape(B, Lq, -1), h)

    def project(self, h: Tensor, inputs: PassInputs, index: int) -> tuple[Tensor, Tensor, Tensor]:
        """q, k and v, (B, L, width) or packed (N, width): queries from `h`, keys/values from `h` (self-attention),
        from `inputs.kv`, or taken already projected from `inputs.keys_values[index]`."""
        keys_values = None if inputs.keys_values is None else inputs.keys_values[index]
        # one wide matmul instead of three narrow ones: narrow matmuls waste most of a CPU's bf16 throughput
        if keys_values is not None:
            return self.query(h), *keys_values
        if inputs.kv is None:
            return fused_linear(h, self.query, self.key, self.value)
        return self.query(h), *fused_linear(inputs.kv, self.key, self.value)

    def output(self, a: Tensor, h: Tensor) -> Tensor:
        """The heads' output `a` (the shape of `h`, the queries' stream) through the value gate and the output norm
        where switched on, then the output projection."""
        if self.gate is not None:
            a = a * F.gelu(self.gate(h))
        if self.out_norm is not None:
            a = self.out_norm(a)
        return self.out(a)


class SynthesizedAttention(Attention):
    """Synthesizer attention (`attention = "synthesizer-random" | "synthesizer-dense"`; variants.Synthesizer): values
    as usual, logits from the synthesizer at the pass's positions; no query or key projection (query, key None)."""

    def forward(self, h: Tensor, inputs: PassInputs, index: int = 0) -> Tensor:
        if (inputs.frame is None) != (self.relative is None):
            raise ValueError("relative-position attention needs a positions.Frame, and only it takes one")
        keys_values = None if inputs.keys_values is None else inputs.keys_values[index]
        v = keys_values[1] if keys_values is not None else self.value(h if inputs.kv is None else inputs.kv)
        q = self.synthesizer.features(h)  # dense: F(h), per head; random: None
        mask, dead_rows, positions = inputs.mask, inputs.dead_rows, inputs.positions
        if inputs.packing is not None:
            return self.output(inputs.packing.attend(q, None, v, mask, dead_rows, self.num_heads, positions,
                                                     self.synthesizer), h)
        B, Lq, _ = h.shape
        v = v.view(B, v.shape[1], self.num_heads, -1).transpose(1, 2)
        if q is not None:
            q = q.view(B, Lq, self.num_heads, -1).transpose(1, 2)
        if inputs.cache is not None:
            _, v = inputs.cache.append(index, None, v)
        a = self.synthesizer(q, None, v, mask, self.dropout_p, self.training, positions)
        if dead_rows is not None:
            a = a.masked_fill(dead_rows, 0.0)
        return self.output(a.transpose(1, 2).reshape(B, Lq, -1), h)


# Keys up to which bf16 training on a CPU writes attention out rather than calling SDPA. On the AVX-512 BF16 EPYC
# (benchmarks/probes/attention_kernel.py, docs/results/benchmarks.md), one thread: forward and backward of SDPA's CPU
# flash kernel
# with a mask took 4-6x the written-out softmax's time at 16-32 keys, 3x at 64-128, 1.2x at 256; whole training
# steps of the two-hour model on 32- and 64-token rows ran 1.06-1.18x faster, but steps of the `mini` preset on full
# 64- and 128-token rows with two threads were level (0.93-1.04x over repeated runs), so the switch stops at 64 keys.
# fp32 is level throughout and keeps SDPA.
EXPLICIT_BF16_MAX_KEYS = 64


def explicit_pays(q: Tensor, k: Tensor) -> bool:
    """Whether to write attention out instead of SDPA: bf16 with gradients, on a CPU, at most
    EXPLICIT_BF16_MAX_KEYS keys (the scores, (B, heads, L, keys), stay small there)."""
    return (q.device.type == "cpu" and q.dtype == torch.bfloat16 and q.requires_grad and torch.is_grad_enabled()
            and k.shape[-2] <= EXPLICIT_BF16_MAX_KEYS)


def written_out(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(d) + mask) v, the mask boolean (False: not attended) or additive; dropout on the
    probabilities when dropout_p > 0 (training)."""
    scores = (q @ k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5)
    if mask is not None:
        scores = scores.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else scores.add_(mask)
    probs = scores.softmax(dim=-1)
    return (dropout(probs, dropout_p, True) if dropout_p > 0 else probs) @ v


def sdpa_known(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kind: str | None) -> Tensor:
    """SDPA under the pass's mask, told its kind where the pass knows it (inputs.PassInputs.mask_kind): no mask for
    "full", is_causal for "causal" (as many queries as keys), either of which lets the flash kernels run on a GPU
    where a materialised mask rules them out; otherwise the mask itself."""
    if kind == "full":
        return F.scaled_dot_product_attention(q, k, v)
    if kind == "causal" and q.shape[-2] == k.shape[-2]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if flex.enabled:  # run.flex_attention: the mask read inside FlexAttention's kernel
        return flex.attend(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(B, L, heads x width) -> (B, heads, L, width), a view."""
    B, L, _ = x.shape
    return x.view(B, L, heads, -1).transpose(1, 2)


def repeat_heads(x: Tensor, groups: int) -> Tensor:
    """(B, kv heads, L, width) -> (B, kv heads x groups, L, width), query head i reading key/value head i // groups
    (HuggingFace's repeat_kv)."""
    B, heads, L, width = x.shape
    return x[:, :, None].expand(B, heads, groups, L, width).reshape(B, heads * groups, L, width)


def repeat_packed(x: Tensor, heads: int, groups: int) -> Tensor:
    """repeat_heads on packed rows: (N, heads x width) -> (N, heads x groups x width)."""
    N = x.shape[0]
    return x.view(N, heads, 1, -1).expand(N, heads, groups, x.shape[-1] // heads).reshape(N, -1)


def fused_linear(x: Tensor, *layers: nn.Linear) -> tuple[Tensor, ...]:
    """[layer(x) for layer in layers], computed as one matmul (wide_linear) and split."""
    return wide_linear(x, *layers).split([layer.out_features for layer in layers], dim=-1)


def wide_linear(x: Tensor, *layers: nn.Linear) -> Tensor:
    """torch.cat([layer(x) for layer in layers], -1) as one matmul against the concatenated weights (int8
    layers have their own concatenation; other layers run one by one)."""
    # F.linear folds a contiguous (B, L, H) input into one (B*L, H) matmul; a strided one (a slice of the rows of
    # two concatenated streams) goes through a batched matmul against B copies of the weight
    x = x.contiguous()
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
    T-TA input). Let such rows attend anywhere, and return them so the block zeroes their output. On a CPU, where
    a read costs nothing, only when some row is dead; on a GPU and under torch.compile always both (zeroing no row
    costs a masked fill a layer): asking whether any row is dead reads the tensor back, which makes the host wait
    for the device (benchmarks/probes/step_syncs.py) and is a graph break in a compiled forward."""
    dead = ~mask.any(dim=-1, keepdim=True)
    if mask.device.type == "cpu" and not torch.compiler.is_compiling() and not bool(dead.any()):
        return mask, None
    return mask | dead, dead
