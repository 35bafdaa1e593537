"""HuggingFace DistilBertForMaskedLM -> maskplay BertMLM. DistilBERT is BERT's post-LN network without token types,
under other names (q_lin, sa_layer_norm, vocab_transform, ...) and config keys (dim, n_layers, hidden_dim, ...),
all norms at eps 1e-12. Exact, sinusoidal_pos_embds included: that table is saved as a weight like a learned one."""

from __future__ import annotations

from typing import Any

from ...config import ModelConfig
from .masked import MaskedConverter, activation_fields, positive_ints, special_layout

_LAYER = {
    "attention.q_lin": "attn.query",
    "attention.k_lin": "attn.key",
    "attention.v_lin": "attn.value",
    "attention.out_lin": "attn.out",
    "sa_layer_norm": "attn_norm",
    "ffn.lin1": "ffn.up",
    "ffn.lin2": "ffn.down",
    "output_layer_norm": "ffn_norm",
}


class DistilBertConverter(MaskedConverter):
    """DistilBertForMaskedLM -> BertMLM (type_vocab_size 0)."""

    architectures = ("DistilBertForMaskedLM",)
    model_type = "distilbert"
    hf_defaults = {"dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072, "activation": "gelu",
                   "dropout": 0.1, "attention_dropout": 0.1}
    top = {
        "distilbert.embeddings.word_embeddings": "embeddings.word",
        "distilbert.embeddings.position_embeddings": "embeddings.position",
        "distilbert.embeddings.LayerNorm": "embeddings.norm",
        "vocab_transform": "head.dense",
        "vocab_layer_norm": "head.norm",
        "vocab_projector": "head",  # vocab_projector.bias -> head.bias; its weight is the tied word table
    }
    layers = "distilbert.transformer.layer"
    layer_map = _LAYER
    skip = ("distilbert.embeddings.position_ids",)
    decoder = ("vocab_projector.weight", "distilbert.embeddings.word_embeddings.weight")
    head_prefix = "vocab_"
    encoders = {"DistilBertModel": "distilbert."}

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        positive_ints(hf_config, ("dim", "n_layers", "n_heads", "hidden_dim"), "DistilBERT")
        vocab = hf_config.vocab_size
        return ModelConfig(
            family="bert", vocab_size=vocab, hidden_size=hf_config.dim, num_layers=hf_config.n_layers,
            num_heads=hf_config.n_heads, intermediate_size=hf_config.hidden_dim,
            max_position=hf_config.max_position_embeddings, type_vocab_size=0, hidden_dropout=hf_config.dropout,
            attention_dropout=hf_config.attention_dropout, layer_norm_eps=1e-12,
            initializer_range=hf_config.initializer_range,
            **special_layout(vocab, pad=hf_config.pad_token_id or 0, unk=100, sos=101, eos=102, mask=103),
            **activation_fields(hf_config.activation, "DistilBERT"))


DISTILBERT = DistilBertConverter()
