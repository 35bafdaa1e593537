"""Normalisation: which norm, and where it sits in a block (ModelConfig.norm, ModelConfig.norm_placement;
docs/guides/switches.md). backbone.Block reads its placement as data (a pre-norm flag and DeepNet's alpha), set once
when the block is built; the default, post-LN, is BERT's.

- "post" (BERT): h = LN(h + f(h)) after attention and after the FFN.
- "pre" (GPT-2, Xiong et al. 2020): h = h + f(LN(h)), and one more norm after the last block (Encoder.final_norm).
- "deepnorm" (Wang et al. 2022, DeepNet): h = LN(alpha h + f(h)) with alpha = (2N)^(1/4), and the value, output
  and FFN weights initialised scaled by beta = (8N)^(-1/4) (N layers; the paper's values for an encoder-only
  and for a decoder-only model are the same formula).
- norm = "rmsnorm" (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * g in place of every LayerNorm of the
  backbone (embeddings, blocks, final norm); the LM head's transform keeps BERT's LayerNorm.
- norm_affine = false (GPT-BERT): every norm of the backbone and of the LM head without a learned gain and bias."""

from __future__ import annotations

from torch import nn

from ..config import ModelConfig


def make_norm(config: ModelConfig, width: int | None = None) -> nn.Module:
    """The backbone's norm over `width` (default the hidden size)."""
    width = config.hidden_size if width is None else width
    if config.norm == "rmsnorm":
        return nn.RMSNorm(width, eps=config.layer_norm_eps, elementwise_affine=config.norm_affine)
    return nn.LayerNorm(width, eps=config.layer_norm_eps, elementwise_affine=config.norm_affine)


def deepnorm_alpha(num_layers: int) -> float:
    """DeepNet's residual scale alpha = (2N)^(1/4)."""
    return (2 * num_layers) ** 0.25


def deepnorm_beta(num_layers: int) -> float:
    """DeepNet's initialisation scale beta = (8N)^(-1/4)."""
    return (8 * num_layers) ** -0.25


def deepnorm_init_(encoder: nn.Module, num_layers: int) -> None:
    """Scale the value, output and FFN weights of every block by beta (queries and keys keep theirs), after the
    model's own initialisation: the paper's xavier gain beta, on maskplay's normal(initializer_range) init."""
    beta = deepnorm_beta(num_layers)
    for block in dict.fromkeys(encoder.layers):  # a shared block (share_layers) once
        for linear in (block.attn.value, block.attn.out, *block.ffn.linears()):
            linear.weight.data.mul_(beta)
