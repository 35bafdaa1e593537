"""A block's feed-forward layer (ModelConfig.ffn; docs/guides/switches.md): BERT's GELU layer (FeedForward), or the
gated ones, GEGLU and SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"), FFN(x) = (act(x W) * (x V)) W_2
with act = GELU or Swish (SiLU). With three matrices instead of two, the hidden width is 2/3 of intermediate_size
(ModelConfig.ffn_width), as the paper does, so that the layer has the parameters of the GELU one it replaces.

GPT-BERT's switches (docs/guides/switches.md): `gelu_tanh`, GELU in its tanh approximation (gelu and geglu);
`ffn_inner_norm`, a norm over the hidden width after the activation (NormFormer's "FFN LN", Shleifer et al. 2021),
FFN(x) = norm(act(x W) * (x V)) W_2. GPT-BERT's GEGLU splits its up-projection [value, gate], this one [gate, value]:
the same layer with the halves of `up`'s rows swapped (a converter from their weights swaps them)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ..config import UNGATED, ModelConfig
from .norms import make_norm

ACTIVATIONS = {"geglu": F.gelu, "swiglu": F.silu}


def _gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


class FeedForward(nn.Module):
    """BERT's: down(GELU(up(h))); ffn = "relu": down(ReLU(up(h))) (OPT's, the original Transformer's)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.ffn_bias)
        # a module, so that int8 inference can fold it into `up` (precision.quantize_int8)
        self.act = nn.ReLU() if config.ffn == "relu" else nn.GELU(approximate="tanh" if config.gelu_tanh else "none")
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.ffn_bias)
        self.inner_norm = make_norm(config, config.intermediate_size) if config.ffn_inner_norm else None

    def forward(self, h: Tensor) -> Tensor:
        if self.inner_norm is not None:
            return self.down(self.inner_norm(self.act(self.up(h))))
        return self.down(self.act(self.up(h)))

    def linears(self) -> tuple[nn.Module, ...]:
        return self.up, self.down


class GatedFeedForward(nn.Module):
    """`up` computes [x W, x V] in one matmul (gate first, then value); `down` is W_2."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        width, bias = config.ffn_width, config.ffn_bias
        self.activation = _gelu_tanh if config.gelu_tanh and config.ffn == "geglu" else ACTIVATIONS[config.ffn]
        self.up = nn.Linear(config.hidden_size, 2 * width, bias=bias)
        self.down = nn.Linear(width, config.hidden_size, bias=bias)
        self.inner_norm = make_norm(config, width) if config.ffn_inner_norm else None

    def forward(self, h: Tensor) -> Tensor:
        gate, value = self.up(h).chunk(2, dim=-1)
        if self.inner_norm is not None:
            return self.down(self.inner_norm(self.activation(gate) * value))
        return self.down(self.activation(gate) * value)

    def linears(self) -> tuple[nn.Module, ...]:
        return self.up, self.down


def make_feedforward(config: ModelConfig) -> nn.Module:
    """BERT's FeedForward unless config.ffn names a gated one."""
    return FeedForward(config) if config.ffn in UNGATED else GatedFeedForward(config)
