"""HuggingFace GPT2LMHeadModel -> maskplay gpt: learned positions, pre-norm LayerNorm blocks with a final norm
(ln_f), GELU in its tanh approximation (gelu_new), biases everywhere, the head tied to the word embeddings. GPT-2's
Conv1D layers keep their weights as (in, out): transposed here; c_attn's fused (H, 3H) splits into query, key and
value in that order."""

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

GPT2_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
    "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "scale_attn_weights": True, "bos_token_id": 50256,
    "eos_token_id": 50256, "pad_token_id": None, "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False, "add_cross_attention": False, "tie_word_embeddings": True,
}
_TOP: dict[str, str | None] = {
    "wte.weight": "embeddings.word.weight", "wpe.weight": "embeddings.position.weight",
    "ln_f.weight": "encoder.final_norm.weight", "ln_f.bias": "encoder.final_norm.bias",
    "lm_head.weight": "head.decoder.weight"}
_LAYER = {"ln_1": "attn_norm", "ln_2": "ffn_norm", "attn.c_proj": "attn.out", "mlp.c_fc": "ffn.up",
          "mlp.c_proj": "ffn.down"}


def config_from_hf_gpt2(hf: Any) -> ModelConfig:
    """The gpt config of a transformers.GPT2Config; what GPT-2's attention may do that maskplay's does not
    (unscaled or layer-scaled scores, cross-attention) is refused in one line."""
    for name, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                       ("add_cross_attention", False)):
        if bool(getattr(hf, name)) != want:
            raise ValueError(f"GPT2LMHeadModel: {name} = {getattr(hf, name)} is not supported (only {want})")
    ffn, tanh = activation(hf.activation_function, "GPT2LMHeadModel")
    return causal_config(
        hf, vocab_size=hf.vocab_size, hidden_size=hf.n_embd, num_layers=hf.n_layer, num_heads=hf.n_head,
        intermediate_size=hf.n_inner or 4 * hf.n_embd, max_position=hf.n_positions, ffn=ffn, gelu_tanh=tanh,
        norm_placement="pre", layer_norm_eps=hf.layer_norm_epsilon, hidden_dropout=hf.resid_pdrop,
        attention_dropout=hf.attn_pdrop, initializer_range=hf.initializer_range, attention_bias=True,
        lm_head="tied" if hf.tie_word_embeddings else "untied")


def _rename(key: str, value: Tensor) -> Renamed | None:
    found = layer_key(key, "h")
    if found is None:
        return top_key(key, value, _TOP)
    index, rest = found
    module, _, leaf = rest.rpartition(".")
    prefix = f"encoder.layers.{index}."
    if rest in ("attn.bias", "attn.masked_bias"):  # the causal mask's buffers in older checkpoints
        return iter([])
    if module == "attn.c_attn":  # Conv1D (H, 3H): q | k | v along the output
        parts = (value.t() if leaf == "weight" else value).chunk(3, dim=0)
        return iter((f"{prefix}attn.{name}.{leaf}", part.contiguous())
                    for name, part in zip(("query", "key", "value"), parts, strict=True))
    if module in _LAYER:
        conv = module.startswith(("attn.", "mlp.")) and leaf == "weight"  # Conv1D: (in, out)
        return iter([(f"{prefix}{_LAYER[module]}.{leaf}", value.t().contiguous() if conv else value)])
    return None


class GPT2Converter(CausalConverter):
    architectures = ("GPT2LMHeadModel",)
    model_type = "gpt2"
    hf_defaults = GPT2_DEFAULTS

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        return config_from_hf_gpt2(hf_config)

    def convert_state(self, hf_config: Any, state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
        state = strip_prefix(state, "transformer.")
        state = without_tied_head(state, "lm_head.weight", "wte.weight", config.lm_head == "tied")
        return map_keys(state, _rename)


GPT2 = GPT2Converter()
