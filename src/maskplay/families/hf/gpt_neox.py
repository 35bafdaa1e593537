"""HuggingFace GPTNeoXForCausalLM (Pythia) -> maskplay gpt: pre-norm LayerNorm blocks whose attention and
feed-forward both read the block's input (parallel_residual), rotary positions on the first rotary_pct of each
head's dimensions (rotary_fraction), exact GELU, a final norm, and an untied head (embed_out). The fused
query_key_value projection is laid out per head, [q_h | k_h | v_h] for each head h in turn: it splits into maskplay's
query, key and value by heads."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ...config import ModelConfig
from .causal import (
    CausalConverter,
    Renamed,
    activation,
    causal_config,
    layer_key,
    map_keys,
    rope,
    strip_prefix,
    top_key,
    without_tied_head,
)

GPT_NEOX_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50432, "hidden_size": 6144, "num_hidden_layers": 44, "num_attention_heads": 64,
    "intermediate_size": 24576, "hidden_act": "gelu", "rotary_pct": 0.25, "rotary_emb_base": 10000,
    "attention_dropout": 0.0, "hidden_dropout": 0.0, "max_position_embeddings": 2048, "initializer_range": 0.02,
    "layer_norm_eps": 1e-5, "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": None, "tie_word_embeddings": False,
    "use_parallel_residual": True, "attention_bias": True,
}
_TOP: dict[str, str | None] = {
    "embed_in.weight": "embeddings.word.weight", "final_layer_norm.weight": "encoder.final_norm.weight",
    "final_layer_norm.bias": "encoder.final_norm.bias", "embed_out.weight": "head.decoder.weight",
    "rotary_emb.inv_freq": None}  # a buffer rebuilt from the config
_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "attention.dense": "attn.out",
          "mlp.dense_h_to_4h": "ffn.up", "mlp.dense_4h_to_h": "ffn.down"}
_BUFFERS = ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq")


def config_from_hf_gpt_neox(hf: Any) -> ModelConfig:
    """The gpt config of a transformers.GPTNeoXConfig."""
    base, fraction = rope(hf, "GPTNeoXForCausalLM")
    ffn, tanh = activation(hf.hidden_act, "GPTNeoXForCausalLM")
    return causal_config(
        hf, vocab_size=hf.vocab_size, hidden_size=hf.hidden_size, num_layers=hf.num_hidden_layers,
        num_heads=hf.num_attention_heads, intermediate_size=hf.intermediate_size,
        max_position=hf.max_position_embeddings, positions="rotary", rotary_base=base, rotary_fraction=fraction,
        norm_placement="pre", parallel_residual=bool(hf.use_parallel_residual), ffn=ffn, gelu_tanh=tanh,
        attention_bias=bool(hf.attention_bias), layer_norm_eps=hf.layer_norm_eps, hidden_dropout=hf.hidden_dropout,
        attention_dropout=hf.attention_dropout, initializer_range=hf.initializer_range,
        lm_head="tied" if hf.tie_word_embeddings else "untied")


def _renamer(heads: int):  # noqa: ANN202
    def rename(key: str, value: Tensor) -> Renamed | None:
        found = layer_key(key, "layers")
        if found is None:
            return top_key(key, value, _TOP)
        index, rest = found
        module, _, leaf = rest.rpartition(".")
        prefix = f"encoder.layers.{index}."
        if rest in _BUFFERS:
            return iter([])
        if module == "attention.query_key_value":  # (heads x [q | k | v] x head width, ...)
            parts = value.reshape(heads, 3, -1, *value.shape[1:]).unbind(1)
            return iter((f"{prefix}attn.{name}.{leaf}", part.reshape(-1, *value.shape[1:]).contiguous())
                        for name, part in zip(("query", "key", "value"), parts, strict=True))
        if module in _LAYER:
            return iter([(f"{prefix}{_LAYER[module]}.{leaf}", value)])
        return None

    return rename


class GPTNeoXConverter(CausalConverter):
    architectures = ("GPTNeoXForCausalLM",)
    model_type = "gpt_neox"
    hf_defaults = GPT_NEOX_DEFAULTS

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        return config_from_hf_gpt_neox(hf_config)

    def convert_state(self, hf_config: Any, state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
        state = strip_prefix(state, "gpt_neox.")
        state = without_tied_head(state, "embed_out.weight", "embed_in.weight", config.lm_head == "tied")
        return map_keys(state, _renamer(config.num_heads))


GPT_NEOX = GPTNeoXConverter()
