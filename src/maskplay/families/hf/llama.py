"""HuggingFace LlamaForCausalLM (SmolLM, TinyLlama) -> maskplay gpt: pre-norm RMSNorm blocks, rotary positions
(rope_theta), SwiGLU without biases, grouped-query attention (num_key_value_heads), a final norm and a head tied to
the embeddings or its own. gate_proj and up_proj become the gated layer's one `up` matmul ([gate | value]); maskplay's
intermediate_size is the one whose 2/3 is LLaMA's width (ModelConfig.ffn_width). Qwen2 (qwen2.py) is this with
biases on the query/key/value projections."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ...config import ModelConfig
from .causal import (
    CausalConverter,
    Renamed,
    causal_config,
    layer_key,
    map_keys,
    rope,
    strip_prefix,
    top_key,
    without_tied_head,
)

LLAMA_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": None, "hidden_act": "silu", "max_position_embeddings": 2048,
    "initializer_range": 0.02, "rms_norm_eps": 1e-6, "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
    "head_dim": None,
}
_TOP: dict[str, str | None] = {
    "embed_tokens.weight": "embeddings.word.weight", "norm.weight": "encoder.final_norm.weight",
    "lm_head.weight": "head.decoder.weight", "rotary_emb.inv_freq": None}  # a buffer rebuilt from the config
_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn.query",
          "self_attn.k_proj": "attn.key", "self_attn.v_proj": "attn.value", "self_attn.o_proj": "attn.out",
          "mlp.down_proj": "ffn.down"}


def gated_intermediate_size(width: int) -> int:
    """The intermediate_size whose gated width (round(2/3 of it), ModelConfig.ffn_width) is `width`."""
    return (3 * width + 1) // 2


def config_from_hf_llama(hf: Any, architecture: str = "LlamaForCausalLM", qkv_bias: bool | None = None) -> ModelConfig:
    """The gpt config of a transformers.LlamaConfig (Qwen2Config: qkv_bias true, its projections' biases)."""
    if hf.hidden_act != "silu":
        raise ValueError(f"{architecture}: hidden_act {hf.hidden_act!r} is not supported (only 'silu': SwiGLU)")
    head_dim = getattr(hf, "head_dim", None)
    if head_dim is not None and head_dim * hf.num_attention_heads != hf.hidden_size:
        raise ValueError(f"{architecture}: head_dim {head_dim} x {hf.num_attention_heads} heads differs from "
                         f"hidden_size {hf.hidden_size}: not supported")
    base, fraction = rope(hf, architecture)
    bias = bool(hf.attention_bias) if qkv_bias is None else qkv_bias
    return causal_config(
        hf, vocab_size=hf.vocab_size, hidden_size=hf.hidden_size, num_layers=hf.num_hidden_layers,
        num_heads=hf.num_attention_heads,
        num_kv_heads=None if hf.num_key_value_heads in (None, hf.num_attention_heads) else hf.num_key_value_heads,
        intermediate_size=gated_intermediate_size(hf.intermediate_size), max_position=hf.max_position_embeddings,
        positions="rotary", rotary_base=base, rotary_fraction=fraction, norm="rmsnorm", norm_placement="pre",
        ffn="swiglu", ffn_bias=bool(getattr(hf, "mlp_bias", False)), attention_bias=bias,
        layer_norm_eps=hf.rms_norm_eps, hidden_dropout=0.0, attention_dropout=hf.attention_dropout,
        initializer_range=hf.initializer_range, lm_head="tied" if hf.tie_word_embeddings else "untied")


def _rename(key: str, value: Tensor) -> Renamed | None:
    found = layer_key(key, "layers")
    if found is None:
        return top_key(key, value, _TOP)
    index, rest = found
    module, _, leaf = rest.rpartition(".")
    if rest == "self_attn.rotary_emb.inv_freq":
        return iter([])
    if module in _LAYER:
        return iter([(f"encoder.layers.{index}.{_LAYER[module]}.{leaf}", value)])
    if module in ("mlp.gate_proj", "mlp.up_proj"):  # joined below
        return iter([(f"encoder.layers.{index}.{module}.{leaf}", value)])
    return None


def join_gated(state: dict[str, Tensor], layers: int) -> dict[str, Tensor]:
    """gate_proj and up_proj of every layer as one `ffn.up` ([gate | value], maskplay's gated layer)."""
    out = dict(state)
    for index in range(layers):
        for leaf in ("weight", "bias"):
            gate, up = (out.pop(f"encoder.layers.{index}.mlp.{name}.{leaf}", None) for name in ("gate_proj", "up_proj"))
            if gate is not None and up is not None:
                out[f"encoder.layers.{index}.ffn.up.{leaf}"] = torch.cat([gate, up])
            elif gate is not None or up is not None:
                raise ValueError(f"layer {index}: mlp.gate_proj.{leaf} and mlp.up_proj.{leaf} come together")
    leftover = sorted(k for k in out if ".mlp." in k)
    if leftover:
        raise ValueError(f"HuggingFace weights with no maskplay counterpart: {leftover}")
    return out


def convert_llama_state(state: dict[str, Tensor], config: ModelConfig, zero_out_bias: bool = False) -> dict[str, Tensor]:
    """A LlamaForCausalLM / Qwen2ForCausalLM state dict -> gpt's. `zero_out_bias`: Qwen2's output projection has no
    bias where its query/key/value projections have one; maskplay's attention_bias covers all four, so it gets zeros."""
    state = strip_prefix(state, "model.")
    state = without_tied_head(state, "lm_head.weight", "embed_tokens.weight", config.lm_head == "tied")
    out = join_gated(map_keys(state, _rename), config.num_layers)
    if zero_out_bias:
        for index in range(config.num_layers):
            key = f"encoder.layers.{index}.attn.out.bias"
            if key in out:
                raise ValueError(f"layer {index}: self_attn.o_proj.bias is unexpected (Qwen2's has none)")
            out[key] = torch.zeros(config.hidden_size)
    return out


class LlamaConverter(CausalConverter):
    architectures = ("LlamaForCausalLM",)
    model_type = "llama"
    hf_defaults = LLAMA_DEFAULTS

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        return config_from_hf_llama(hf_config)

    def convert_state(self, hf_config: Any, state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
        return convert_llama_state(state, config)


LLAMA = LlamaConverter()
