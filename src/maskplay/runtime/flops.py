"""Model FLOPs (2 per multiply-add, matmuls only) for utilisation figures. Embedding look-ups, LayerNorm,
softmax and GELU are left out, as in the usual MFU accounting (PaLM appendix B)."""

from __future__ import annotations

from ..config import ModelConfig
from ..registry import rules


def forward_flops_per_token(config: ModelConfig, seq_len: int, predicted_fraction: float = 1.0) -> float:
    """Forward FLOPs per input token: blocks over every token (dense attention over `seq_len` keys), the
    LM head (transform + tied decoder) over the predicted fraction of tokens."""
    return config.num_layers * layer_flops(config, seq_len) + predicted_fraction * head_flops(config)


def training_flops_per_token(config: ModelConfig, seq_len: int, predicted_fraction: float = 1.0) -> float:
    """Forward + backward (twice the forward) per input token."""
    return 3 * forward_flops_per_token(config, seq_len, predicted_fraction)


def predicted_fraction(family: str) -> float:
    """Share of tokens at which a family applies its LM head during training (the family's
    `predicted_fraction`: ELECTRA's generator head, UniLM's masked tokens, XLNet's partial prediction at K = 6)."""
    return rules(family).predicted_fraction


def family_training_flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """A training step per input token for the config's family: its own count where it has one (its
    training_flops_per_token: ELECTRA's two towers, XLNet's two streams, each in its family's file), else the
    one-tower formula at its predicted fraction."""
    family = rules(config.family)
    own = family.training_flops_per_token(config, seq_len)
    return own if own is not None else training_flops_per_token(config, seq_len, family.predicted_fraction)


def layer_flops(config: ModelConfig, seq_len: int) -> float:
    """One block's forward FLOPs per token: Q, K, V, output projections, dense attention over seq_len keys, FFN."""
    h, f = config.hidden_size, config.intermediate_size
    return 8 * h * h + 4 * h * f + 4 * seq_len * h


def head_flops(config: ModelConfig) -> float:
    """BERT's LM head per predicted token: the transform and the tied decoder."""
    return 2 * config.hidden_size ** 2 + 2 * config.hidden_size * config.vocab_size


def scoring_flops(config: ModelConfig, lengths: list[int], method: str) -> float:
    """Forward FLOPs to score sentences of `lengths` pieces each ([SOS]/[EOS] not included), as each method
    computes them:
    - "one-pass": one pass per sentence, the head at every piece (T-TA; GPT's causal score);
    - "one-pass-full": the same with the head at every position, [SOS]/[EOS] included (a HuggingFace decoder's
      logits);
    - "pll": one copy per piece, the last block and the head at the masked position only (maskplay's PLL);
    - "pll-naive": one copy per piece, every block and the head everywhere (HuggingFace BertForMaskedLM);
    - "encode": one pass, no head (embeddings);
    - "two-stream": XLNet's causal score, both streams over every position, the last layer's content rows
      skipped, the head at every piece (maskplay);
    - "two-stream-full": the same with every layer's content rows and the head at every position (HuggingFace
      XLNetLMHeadModel with a full target_mapping)."""
    total = 0.0
    h, f, n_layers = config.hidden_size, config.intermediate_size, config.num_layers
    for n in lengths:
        L = n + 2
        body = n_layers * L * layer_flops(config, L)
        if method == "one-pass":
            total += body + n * head_flops(config)
        elif method == "one-pass-full":
            total += body + L * head_flops(config)
        elif method == "encode":
            total += body
        elif method == "two-stream":
            total += (2 * n_layers - 1) * L * layer_flops(config, L) + n * head_flops(config)
        elif method == "two-stream-full":
            total += 2 * body + L * head_flops(config)
        elif method == "pll-naive":
            total += n * (body + L * head_flops(config))
        elif method == "pll":
            lower = (n_layers - 1) * L * layer_flops(config, L)
            last = L * 4 * h * h + (4 * h * h + 4 * h * f + 4 * L * h)  # K, V everywhere; the rest at one query
            total += n * (lower + last + head_flops(config))
        else:
            raise ValueError(f"unknown method {method!r}")
    return total
