"""HuggingFace OPTForCausalLM (the BabyLM 2023 baseline) -> maskplay gpt: learned positions, LayerNorm blocks
pre-norm with a final norm (do_layer_norm_before, every size but 350m) or post-norm without one, ReLU, biases on
every projection (enable_bias), the head tied to the embeddings.

OPT's position table has two rows more than its positions: a token's row is its position among the row's real
tokens + 2 (OPTLearnedPositionalEmbedding's offset); row 1 is read only by padding and row 0 never. maskplay's
table is rows 2.. (the same real-token outputs; positions count from 0 at the first column in a full pass and from
the first real token in the cache, as OPT counts them). A model whose embeddings are narrower than its blocks
(word_embed_proj_dim, project_in / project_out: opt-350m) is refused."""

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
    strip_prefix,
    top_key,
    without_tied_head,
)

OPT_POSITION_OFFSET = 2
OPT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50272, "hidden_size": 768, "num_hidden_layers": 12, "ffn_dim": 3072,
    "max_position_embeddings": 2048, "do_layer_norm_before": True, "_remove_final_layer_norm": False,
    "word_embed_proj_dim": None, "dropout": 0.1, "attention_dropout": 0.0, "num_attention_heads": 12,
    "activation_function": "relu", "init_std": 0.02, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
    "enable_bias": True, "layer_norm_elementwise_affine": True, "tie_word_embeddings": True,
}
_TOP: dict[str, str | None] = {
    "embed_tokens.weight": "embeddings.word.weight", "final_layer_norm.weight": "encoder.final_norm.weight",
    "final_layer_norm.bias": "encoder.final_norm.bias"}
_LAYER = {"self_attn.q_proj": "attn.query", "self_attn.k_proj": "attn.key", "self_attn.v_proj": "attn.value",
          "self_attn.out_proj": "attn.out", "self_attn_layer_norm": "attn_norm", "fc1": "ffn.up", "fc2": "ffn.down",
          "final_layer_norm": "ffn_norm"}


def config_from_hf_opt(hf: Any) -> ModelConfig:
    """The gpt config of a transformers.OPTConfig."""
    projected = hf.word_embed_proj_dim
    if projected is not None and projected != hf.hidden_size:
        raise ValueError(f"OPTForCausalLM: word_embed_proj_dim {projected} differs from hidden_size "
                         f"{hf.hidden_size} (project_in / project_out, opt-350m): not supported")
    pre = bool(hf.do_layer_norm_before)
    if pre and hf._remove_final_layer_norm:
        raise ValueError("OPTForCausalLM: _remove_final_layer_norm with do_layer_norm_before is not supported")
    if not hf.tie_word_embeddings:
        raise ValueError("OPTForCausalLM: tie_word_embeddings = false is not supported (OPT ties its head)")
    ffn, tanh = activation(hf.activation_function, "OPTForCausalLM")
    return causal_config(
        hf, vocab_size=hf.vocab_size, hidden_size=hf.hidden_size, num_layers=hf.num_hidden_layers,
        num_heads=hf.num_attention_heads, intermediate_size=hf.ffn_dim, max_position=hf.max_position_embeddings,
        norm_placement="pre" if pre else "post", ffn=ffn, gelu_tanh=tanh, attention_bias=bool(hf.enable_bias),
        ffn_bias=bool(hf.enable_bias), norm_affine=bool(hf.layer_norm_elementwise_affine), layer_norm_eps=1e-5,
        hidden_dropout=hf.dropout, attention_dropout=hf.attention_dropout, initializer_range=hf.init_std,
        lm_head="tied")


def _rename(key: str, value: Tensor) -> Renamed | None:
    if key == "embed_positions.weight":  # rows 0 and 1: never a real token's (the offset, above)
        return iter([("embeddings.position.weight", value[OPT_POSITION_OFFSET:])])
    found = layer_key(key, "layers")
    if found is None:
        return top_key(key, value, _TOP)
    index, rest = found
    module, _, leaf = rest.rpartition(".")
    if module in _LAYER:
        return iter([(f"encoder.layers.{index}.{_LAYER[module]}.{leaf}", value)])
    return None


class OPTConverter(CausalConverter):
    architectures = ("OPTForCausalLM",)
    model_type = "opt"
    hf_defaults = OPT_DEFAULTS

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        return config_from_hf_opt(hf_config)

    def convert_state(self, hf_config: Any, state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
        state = strip_prefix(strip_prefix(state, "model."), "decoder.")
        return map_keys(without_tied_head(state, "lm_head.weight", "embed_tokens.weight", True), _rename)


OPT = OPTConverter()
