"""HuggingFace Qwen2ForCausalLM -> maskplay gpt: LLaMA's blocks (llama.py) with biases on the query, key and value
projections and none on the output projection (maskplay's attention_bias covers all four: the output's is zero).
Sliding-window attention (use_sliding_window) is refused."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ...config import ModelConfig
from .causal import CausalConverter
from .llama import LLAMA_DEFAULTS, config_from_hf_llama, convert_llama_state

QWEN2_DEFAULTS: dict[str, Any] = {
    **LLAMA_DEFAULTS, "vocab_size": 151936, "intermediate_size": 22016, "max_position_embeddings": 32768,
    "bos_token_id": None, "eos_token_id": None, "use_sliding_window": False,
}


def config_from_hf_qwen2(hf: Any) -> ModelConfig:
    if hf.use_sliding_window:
        raise ValueError("Qwen2ForCausalLM: use_sliding_window (sliding-window attention) is not supported")
    return config_from_hf_llama(hf, "Qwen2ForCausalLM", qkv_bias=True)


class Qwen2Converter(CausalConverter):
    architectures = ("Qwen2ForCausalLM",)
    model_type = "qwen2"
    hf_defaults = QWEN2_DEFAULTS

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        return config_from_hf_qwen2(hf_config)

    def convert_state(self, hf_config: Any, state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
        return convert_llama_state(state, config, zero_out_bias=True)


QWEN2 = Qwen2Converter()
