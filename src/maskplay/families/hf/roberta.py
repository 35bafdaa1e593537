"""HuggingFace RobertaForMaskedLM and XLMRobertaForMaskedLM -> maskplay BertMLM. RoBERTa is BERT's network with
two layout changes: its positions start after the padding index (a token at column i reads row
pad_token_id + 1 + i; the rows up to the padding index are never read by a real token), and it has one token type.
Exact: maskplay's table is HuggingFace's from row pad_token_id + 1 on, so max_position is 2 shorter (514 -> 512)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ...config import ModelConfig
from .common import BERT_DEFAULTS, backbone_fields
from .masked import MaskedConverter, activation_fields, special_layout

_POSITIONS = "roberta.embeddings.position_embeddings.weight"


class RobertaConverter(MaskedConverter):
    """RobertaForMaskedLM (XLMRobertaForMaskedLM: the same weights under the same names) -> BertMLM."""

    architectures = ("RobertaForMaskedLM", "XLMRobertaForMaskedLM")
    model_type = "roberta"
    hf_defaults = {**BERT_DEFAULTS, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "vocab_size": 50265,
                   "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5}
    top = {
        "roberta.embeddings.word_embeddings": "embeddings.word",
        "roberta.embeddings.position_embeddings": "embeddings.position",
        "roberta.embeddings.token_type_embeddings": "embeddings.segment",
        "roberta.embeddings.LayerNorm": "embeddings.norm",
        "lm_head.dense": "head.dense",
        "lm_head.layer_norm": "head.norm",
        "lm_head": "head",  # lm_head.bias -> head.bias
    }
    layers = "roberta.encoder.layer"
    skip = ("roberta.embeddings.position_ids", "roberta.embeddings.token_type_ids")
    decoder = ("lm_head.decoder.weight", "roberta.embeddings.word_embeddings.weight")
    decoder_bias = ("lm_head.decoder.bias", "lm_head.bias")
    head_prefix = "lm_head."
    encoders = {"RobertaModel": "roberta.", "XLMRobertaModel": "roberta."}

    def recognise(self, data: dict[str, Any], state: dict[str, Tensor]) -> str | None:
        if data.get("model_type") == "xlm-roberta" and any(k.startswith(self.head_prefix) for k in state):
            return "XLMRobertaForMaskedLM"
        return super().recognise(data, state)

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        position = hf_config.position_embedding_type or "absolute"
        if position != "absolute":
            raise ValueError(f"RoBERTa: only absolute position embeddings are supported, got {position!r}")
        if hf_config.is_decoder:
            raise ValueError("RoBERTa with is_decoder = true attends causally: only its masked LM converts")
        offset = self.offset(hf_config)
        if hf_config.max_position_embeddings <= offset:
            raise ValueError(f"RoBERTa: max_position_embeddings ({hf_config.max_position_embeddings}) leaves no "
                             f"position after the padding index {hf_config.pad_token_id}")
        fields = backbone_fields(hf_config)
        vocab = hf_config.vocab_size
        pad, sos, eos = (x if x is not None else d for x, d in ((hf_config.pad_token_id, 1), (hf_config.bos_token_id, 0),
                                                                 (hf_config.eos_token_id, 2)))
        fields.update(max_position=hf_config.max_position_embeddings - offset,
                      **special_layout(vocab, pad=pad, sos=sos, eos=eos, unk=3, mask=vocab - 1),
                      **activation_fields(hf_config.hidden_act, "RoBERTa"))
        return ModelConfig(family="bert", **fields)

    @staticmethod
    def offset(hf_config: Any) -> int:
        """The rows before a real token's first position: padding index + 1 (RoBERTa's
        create_position_ids_from_input_ids counts real tokens from padding_idx + 1)."""
        return (hf_config.pad_token_id or 0) + 1

    def reshape(self, state: dict[str, Tensor], hf_config: Any) -> dict[str, Tensor]:
        if _POSITIONS in state:
            state[_POSITIONS] = state[_POSITIONS][self.offset(hf_config):]
        return state


ROBERTA = RobertaConverter()
