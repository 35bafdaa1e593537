"""The one place that picks a block's attention layer from the config (ModelConfig.attention; docs/guides/switches.md).
Talking heads, relative positions and adaptive spans are switches inside the dot-product layer (dense.Attention);
disentangled positions have their own (disentangled.DisentangledAttention)."""

from __future__ import annotations

from torch import nn

from ...config import ModelConfig
from .dense import Attention, SynthesizedAttention
from .disentangled import DisentangledAttention
from .lsra import LongShortAttention

# config.ATTENTION_KINDS -> the layer that computes it
KINDS: dict[str, type[nn.Module]] = {"dot": Attention, "synthesizer-random": SynthesizedAttention,
                                     "synthesizer-dense": SynthesizedAttention, "lsra": LongShortAttention}


def make_attention(config: ModelConfig) -> nn.Module:
    """dot: dense.Attention; synthesizer-random / synthesizer-dense: dense.SynthesizedAttention; lsra: Lite
    Transformer's long-short range attention (lsra.py); under positions = "disentangled", dot-product attention with
    DeBERTa's disentangled scores (disentangled.py). Each is called as `attn(h, inputs, index)`."""
    if config.positions == "disentangled":
        return DisentangledAttention(config)
    return KINDS[config.attention](config)
