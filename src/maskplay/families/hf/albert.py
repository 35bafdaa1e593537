"""HuggingFace AlbertForMaskedLM -> maskplay BertMLM with ALBERT's two halves: factorised embeddings
(`embedding_size`: the tables at width E, projected up by embeddings_project = embedding_hidden_mapping_in, the
head's dense back down to E) and one block shared by every layer (`share_layers`). ALBERT's hidden_act,
gelu_new, is the tanh GELU in the feed-forward (`gelu_tanh`) and in the head (`head_gelu_tanh`). Exact for the
released layout, one layer group of one layer (num_hidden_groups = inner_group_num = 1); others are refused."""

from __future__ import annotations

from typing import Any

from ...config import ModelConfig
from .common import backbone_fields
from .masked import MaskedConverter, activation_fields, positive_ints, special_layout

_LAYER = {
    "attention.query": "attn.query",
    "attention.key": "attn.key",
    "attention.value": "attn.value",
    "attention.dense": "attn.out",
    "attention.LayerNorm": "attn_norm",
    "ffn": "ffn.up",
    "ffn_output": "ffn.down",
    "full_layer_layer_norm": "ffn_norm",
}


class AlbertConverter(MaskedConverter):
    """AlbertForMaskedLM -> BertMLM with embedding_size and share_layers."""

    architectures = ("AlbertForMaskedLM",)
    model_type = "albert"
    hf_defaults = {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 4096, "num_hidden_layers": 12,
                   "num_hidden_groups": 1, "num_attention_heads": 64, "intermediate_size": 16384,
                   "inner_group_num": 1, "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0,
                   "attention_probs_dropout_prob": 0.0, "pad_token_id": 0}
    top = {
        "albert.embeddings.word_embeddings": "embeddings.word",
        "albert.embeddings.position_embeddings": "embeddings.position",
        "albert.embeddings.token_type_embeddings": "embeddings.segment",
        "albert.embeddings.LayerNorm": "embeddings.norm",
        "albert.encoder.embedding_hidden_mapping_in": "embeddings_project",
        "predictions.dense": "head.dense",
        "predictions.LayerNorm": "head.norm",
        "predictions": "head",  # predictions.bias -> head.bias
    }
    layers = "albert.encoder.albert_layer_groups.0.albert_layers"
    layer_map = _LAYER
    skip = ("albert.embeddings.position_ids", "albert.embeddings.token_type_ids")
    decoder = ("predictions.decoder.weight", "albert.embeddings.word_embeddings.weight")
    decoder_bias = ("predictions.decoder.bias", "predictions.bias")
    head_prefix = "predictions."
    encoders = {"AlbertModel": "albert."}

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        positive_ints(hf_config, ("embedding_size", "num_hidden_groups", "inner_group_num"), "ALBERT")
        for name in ("num_hidden_groups", "inner_group_num"):
            if getattr(hf_config, name) != 1:
                raise ValueError(f"ALBERT: {name} = {getattr(hf_config, name)}: maskplay shares one block in every "
                                 "layer (share_layers), the released models' layout (1 group of 1 layer)")
        if (hf_config.position_embedding_type or "absolute") != "absolute":
            raise ValueError(f"ALBERT: only absolute position embeddings are supported, got "
                             f"{hf_config.position_embedding_type!r}")
        if hf_config.embedding_size == hf_config.hidden_size:
            raise ValueError("ALBERT: embedding_size equals hidden_size: maskplay projects the embeddings only when "
                             "they are narrower (embedding_hidden_mapping_in would have no counterpart)")
        fields = backbone_fields(hf_config)
        vocab = hf_config.vocab_size
        fields.update(embedding_size=hf_config.embedding_size, share_layers=True,
                      **special_layout(vocab, pad=hf_config.pad_token_id or 0, unk=1, sos=2, eos=3, mask=4),
                      **activation_fields(hf_config.hidden_act, "ALBERT"))
        return ModelConfig(family="bert", **fields)


ALBERT = AlbertConverter()
