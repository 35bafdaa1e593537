"""Lite Transformer's long-short range attention (LSRA; Wu et al. 2020, "Lite Transformer with Long-Short Range
Attention", ICLR; `attention = "lsra"`, docs/guides/switches.md).

The layer's input channels are split in two halves:
- the first half goes through ordinary multi-head attention at half the width (every head keeps its place, at half
  the head width), for the long-range, global relations;
- the second half goes through a convolution branch for the local ones: GLU(x W_g) (a linear layer to twice the
  width, then a gated linear unit), then a lightweight convolution: a depthwise convolution of kernel size K whose
  weights are shared by the channels of a head and softmax-normalised over the taps (Wu et al. 2019, "Pay Less
  Attention with Lightweight and Dynamic Convolutions").
The two outputs are concatenated and projected back by one hidden x hidden linear layer, as attention's output is.

The family's mask, exactly. A convolution over a sequence sees its neighbours whatever the family says; here it is
written as what it is, a banded L x L matrix per head, A[i, j] = w[j - i + c] for |j - i| <= c = (K - 1) / 2, and
that matrix is cut by the family's boolean mask (padding, T-TA's diagonal, GPT's causality, UniLM's prefix/seq2seq
masks, whatever the pass holds) before it is normalised: the softmax runs over the taps that are both inside the
kernel and allowed, A[i, j] = exp(w[j - i + c]) / sum over allowed taps j' of exp(w[j' - i + c]). With every tap
allowed (a BERT row away from the edges) that is Lite Transformer's softmax-normalised kernel; at an edge, a
forbidden or padded tap is dropped and the others renormalised, rather than reading zeros. A row with no allowed
tap (T-TA's token whose neighbours are all padding) outputs zero. The kernel is centred on the query, so GPT, whose
mask keeps the taps j <= i, sees (K + 1) / 2 of them (set K = 2k - 1 for k taps to the left, as a causal
convolution of size k).

Distances are those of the pass's positions (positions.PassPositions: key position - query position), so packed
inference, PLL's last-layer rows and the key/value cache (each cached token's absolute position) see the taps the
plain forward pass sees. In T-TA the branch reads the key/value stream (the embedding output) and writes the query
stream, like attention there: output i is a mix of token j != i only. The kernel's dropout is attention's
(DropConnect on the normalised taps, as lightweight convolution's weight dropout)."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...config import ModelConfig
from ..dropout import dropout
from ..positions import PassPositions
from .dense import Attention
from .inputs import KeyValueStore, PassInputs


class LightweightConv(nn.Module):
    """The convolution branch: GLU input projection and the softmax-normalised kernel, one per head."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        half = config.hidden_size // 2
        self.heads, self.size = config.num_heads, config.lsra_kernel
        self.glu = nn.Linear(half, 2 * half)  # GLU: the first half of its output gated by the sigmoid of the second
        # (heads, K) logits of the taps; nearly uniform at initialisation (a local average)
        self.kernel = nn.Parameter(torch.randn(self.heads, self.size) * config.initializer_range)

    def inputs(self, x: Tensor) -> Tensor:
        """GLU(x W_g): (..., H/2) -> (..., H/2)."""
        return F.glu(self.glu(x), dim=-1)

    def weights(self, mask: Tensor, positions: PassPositions) -> Tensor:
        """The banded matrix (B, heads, Lq, Lk), cut by `mask` (bool, True = may attend; or a float mask, -inf where
        attention is forbidden) and renormalised over the allowed taps; rows without one are zero."""
        c = (self.size - 1) // 2
        offset = positions.key[:, None, :] - positions.query[:, :, None]  # (1 or B, Lq, Lk)
        logits = self.kernel[:, (offset + c).clamp(0, self.size - 1)].transpose(0, 1)  # (1 or B, heads, Lq, Lk)
        allowed = mask if mask.dtype == torch.bool else mask > float("-inf")
        allowed = allowed & (offset.abs() <= c)[:, None]
        empty = ~allowed.any(dim=-1, keepdim=True)
        # an empty row's logits are zeroed before the softmax (no NaN, in the gradient either), its weights after
        logits = torch.where(allowed, logits, float("-inf")).masked_fill(empty, 0.0)
        return logits.softmax(dim=-1).masked_fill(empty, 0.0)

    def forward(self, u: Tensor, mask: Tensor, positions: PassPositions, dropout_p: float = 0.0,
                training: bool = False) -> Tensor:
        """u (B, heads, Lk, d): the GLU outputs of the keys' positions, per head; returns (B, heads, Lq, d)."""
        weights = self.weights(mask, positions).to(u.dtype)
        if training and dropout_p > 0:
            weights = dropout(weights, dropout_p, True)
        return weights @ u


class LongShortAttention(nn.Module):
    """LSRA in place of dense.Attention, called as it is (`attn(h, inputs, index)`). Without `inputs.positions` (a
    direct call) the columns 0..L-1 are the positions. `inputs.keys_values[index]`, when given, is (None, the raw
    key/value stream): backbone.Encoder hands T-TA's embedding output over unprojected, since each branch reads its
    own half."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.half = config.hidden_size // 2
        # the attention branch: the backbone's own attention, at half the width (heads at half the head width)
        self.attention = Attention(dataclasses.replace(config, family="bert", hidden_size=self.half, attention="dot"))
        self.attention.out = nn.Identity()  # one projection of both branches' outputs below
        self.conv = LightweightConv(config)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=bool(config.attention_bias))
        self.dropout_p = config.attention_dropout

    @property
    def value(self) -> nn.Linear:
        """The attention branch's value projection (DeepNorm scales it at initialisation, norms.py)."""
        return self.attention.value

    def forward(self, h: Tensor, inputs: PassInputs, index: int = 0) -> Tensor:
        keys_values = None if inputs.keys_values is None else inputs.keys_values[index]
        source = keys_values[1] if keys_values is not None else inputs.kv  # the key/value stream; None: h itself
        mask, dead_rows, packing, positions = inputs.mask, inputs.dead_rows, inputs.packing, inputs.positions
        if positions is None:
            columns = torch.arange(mask.shape[-1], device=h.device)[None]
            positions = PassPositions(torch.arange(mask.shape[-2], device=h.device)[None], columns)
        u = self.conv.inputs((h if source is None else source)[..., self.half:])
        if packing is not None:
            u = packing.pad(u)  # the convolution runs on the padded layout; packing.attend cuts positions itself
        B, Lk = u.shape[:2]
        u = u.view(B, Lk, self.conv.heads, -1).transpose(1, 2)  # (B, heads, Lk, d)
        cache = None if inputs.cache is None else _ConvInputsInCache(inputs.cache, u)
        branch = dataclasses.replace(inputs, kv=None if source is None else source[..., :self.half], keys_values=None,
                                     cache=cache, positions=positions)
        a = self.attention(h[..., :self.half], branch, index)
        c = self.conv(u if cache is None else cache.everything, mask, positions, self.dropout_p, self.training)
        if dead_rows is not None:
            c = c.masked_fill(dead_rows, 0.0)
        c = c.transpose(1, 2).reshape(B, c.shape[2], -1)
        if packing is not None:
            c = packing.pack(c)
        return self.out(torch.cat([a, c], dim=-1))


class _ConvInputsInCache:
    """The cache the attention branch sees: the convolution's inputs of the new tokens travel in the cache beside
    the attention branch's values (the same (B, heads, T, d) layout, concatenated on the last axis), so that a
    generated token's convolution reads the cached tokens' inputs; `everything` holds all of them after append."""

    def __init__(self, cache: KeyValueStore, u: Tensor) -> None:
        self.cache, self.u = cache, u
        self.everything = u

    def append(self, index: int, k: Tensor | None, v: Tensor) -> tuple[Tensor, Tensor]:
        keys, both = self.cache.append(index, k, torch.cat([v, self.u.to(v.dtype)], dim=-1))
        width = v.shape[-1]
        self.everything = both[..., width:]
        return keys, both[..., :width]
