"""Model FLOPs (2 per multiply-add, matmuls only) for utilisation figures. Embedding look-ups, LayerNorm,
softmax and GELU are left out, as in the usual MFU accounting (PaLM appendix B)."""

from __future__ import annotations

from .config import ModelConfig


def forward_flops_per_token(config: ModelConfig, seq_len: int, predicted_fraction: float = 1.0) -> float:
    """Forward FLOPs per input token: blocks over every token (dense attention over `seq_len` keys), the
    LM head (transform + tied decoder) over the predicted fraction of tokens."""
    h, f, v = config.hidden_size, config.intermediate_size, config.vocab_size
    per_layer = 8 * h * h + 4 * h * f + 4 * seq_len * h
    head = 2 * h * h + 2 * h * v
    return config.num_layers * per_layer + predicted_fraction * head


def training_flops_per_token(config: ModelConfig, seq_len: int, predicted_fraction: float = 1.0) -> float:
    """Forward + backward (twice the forward) per input token."""
    return 3 * forward_flops_per_token(config, seq_len, predicted_fraction)


def predicted_fraction(family: str) -> float:
    """Share of tokens at which each family applies its LM head during training."""
    return {"bert": 0.15, "gpt": 1.0, "tta": 1.0}[family]
