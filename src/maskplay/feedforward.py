"""A block's feed-forward layer (ModelConfig.ffn; docs/SWITCHES.md): BERT's GELU layer (FeedForward), or the
gated ones, GEGLU and SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"), FFN(x) = (act(x W) * (x V)) W_2
with act = GELU or Swish (SiLU). With three matrices instead of two, the hidden width is 2/3 of intermediate_size
(ModelConfig.ffn_width), as the paper does, so that the layer has the parameters of the GELU one it replaces."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig

ACTIVATIONS = {"geglu": F.gelu, "swiglu": F.silu}


class FeedForward(nn.Module):
    """BERT's: down(GELU(up(h)))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.ffn_bias)
        self.act = nn.GELU()  # a module, so that int8 inference can fold it into `up` (precision.quantize_int8)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.ffn_bias)

    def forward(self, h: Tensor) -> Tensor:
        return self.down(self.act(self.up(h)))

    def linears(self) -> tuple[nn.Module, ...]:
        return self.up, self.down


class GatedFeedForward(nn.Module):
    """`up` computes [x W, x V] in one matmul (gate first, then value); `down` is W_2."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        width, bias = config.ffn_width, config.ffn_bias
        self.activation = ACTIVATIONS[config.ffn]
        self.up = nn.Linear(config.hidden_size, 2 * width, bias=bias)
        self.down = nn.Linear(width, config.hidden_size, bias=bias)

    def forward(self, h: Tensor) -> Tensor:
        gate, value = self.up(h).chunk(2, dim=-1)
        return self.down(self.activation(gate) * value)

    def linears(self) -> tuple[nn.Module, ...]:
        return self.up, self.down


def make_feedforward(config: ModelConfig) -> nn.Module:
    """BERT's FeedForward unless config.ffn names a gated one."""
    return FeedForward(config) if config.ffn == "gelu" else GatedFeedForward(config)
