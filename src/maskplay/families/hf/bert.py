"""HuggingFace BertForMaskedLM <-> maskplay BertMLM. A BertMLM with embedding_size goes out as an
ElectraForMaskedLM (the ELECTRA converter reads that one back)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from ...config import ModelConfig
from ..base import MaskplayModel
from ..bert import BertMLM
from .common import (
    BERT_DEFAULTS,
    HF_BUFFERS,
    OPTIONAL_HF_KEYS,
    HFCheckpoint,
    HFConverter,
    HFExport,
    backbone_fields,
    bert_like_config_dict,
    check_supported,
    check_tied,
    from_hf_keys,
    to_hf_keys,
)
from .electra import maskplay_to_hf_electra_generator
from .registry import check_complete

BERT_TOP = {
    "bert.embeddings.word_embeddings": "embeddings.word",
    "bert.embeddings.position_embeddings": "embeddings.position",
    "bert.embeddings.token_type_embeddings": "embeddings.segment",
    "bert.embeddings.LayerNorm": "embeddings.norm",
    "cls.predictions.transform.dense": "head.dense",
    "cls.predictions.transform.LayerNorm": "head.norm",
    "cls.predictions": "head",  # cls.predictions.bias -> head.bias
}
BERT_LAYERS = "bert.encoder.layer"
_BERT_WORD = "bert.embeddings.word_embeddings.weight"
_BERT_DECODER = "cls.predictions.decoder.weight"
_BERT_DECODER_BIAS = "cls.predictions.decoder.bias"


def hf_bert_to_maskplay(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Rename a BertForMaskedLM state dict to BertMLM's. The decoder must be tied to the word embeddings
    and its bias must be the head's bias; anything unrecognised is an error naming the key."""
    out = from_hf_keys(hf_state, BERT_TOP, BERT_LAYERS, skip=(*HF_BUFFERS, _BERT_DECODER, _BERT_DECODER_BIAS))
    check_tied(hf_state, _BERT_DECODER, _BERT_WORD)
    bias = hf_state.get(_BERT_DECODER_BIAS)
    if bias is not None and "cls.predictions.bias" in hf_state and not torch.equal(bias, hf_state["cls.predictions.bias"]):
        raise ValueError(f"{_BERT_DECODER_BIAS} differs from cls.predictions.bias")
    return out


def maskplay_to_hf_bert(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The inverse rename, with the tied decoder weight and bias written out as HuggingFace expects."""
    out = to_hf_keys(state, BERT_TOP, BERT_LAYERS)
    out[_BERT_DECODER] = state["embeddings.word.weight"]
    out[_BERT_DECODER_BIAS] = state["head.bias"]
    return out


def config_from_hf_bert(hf_config: Any) -> ModelConfig:
    """A BertMLM config matching a transformers.BertConfig."""
    check_supported(hf_config, "BERT")
    return ModelConfig(family="bert", **backbone_fields(hf_config))


def bert_config_dict(config: ModelConfig, generator: bool = False) -> dict[str, Any]:
    """config.json of the BertForMaskedLM a BertMLM without embedding_size becomes (ElectraForMaskedLM with it)."""
    if generator:
        raise ValueError("a BertMLM has no separate generator")
    return bert_like_config_dict(config, "BertForMaskedLM" if config.embedding_size is None else "ElectraForMaskedLM")


class BertConverter(HFConverter):
    """BertMLM <-> BertForMaskedLM (ElectraForMaskedLM out, for a BertMLM with embedding_size)."""

    family = "bert"
    architectures = ("BertForMaskedLM",)
    hf_defaults = BERT_DEFAULTS
    encoders = {"BertModel": "bert."}  # the headless encoder (sentence-transformers'): families/hf/directory.py

    def state_from_hf(self, hf_state: dict[str, Tensor], hf_config: Any) -> dict[str, Tensor]:
        return hf_bert_to_maskplay(hf_state)

    def recognise(self, data: dict[str, Any], state: dict[str, Tensor]) -> str | None:
        if data.get("model_type") == "bert" and not data.get("is_decoder", False):
            return "BertForMaskedLM"
        return None

    def describe(self, architecture: str, model: MaskplayModel, paired: bool = False) -> str:
        return "bert"

    def from_hf(self, architecture: str, checkpoint: HFCheckpoint, generator: HFCheckpoint | None = None,
                special_ids: dict[str, Any] | None = None) -> MaskplayModel:
        hf_config, state = checkpoint
        config, converted = config_from_hf_bert(hf_config), hf_bert_to_maskplay(state)
        if special_ids:
            config = dataclasses.replace(config, **special_ids)
        model = BertMLM(config)
        check_complete(model, [state], [architecture], OPTIONAL_HF_KEYS)
        model.load_strict(converted, source=f"the converted {architecture} weights")
        return model.eval()

    def to_hf(self, model: MaskplayModel) -> list[HFExport]:
        config, state = model.config, model.state_dict()
        head = maskplay_to_hf_bert(state) if config.embedding_size is None else maskplay_to_hf_electra_generator(state)
        return [(bert_config_dict(config), head)]

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        return config_from_hf_bert(hf_config)

    def config_to_hf(self, config: ModelConfig, generator: bool = False) -> dict[str, Any]:
        return bert_config_dict(config, generator)


BERT = BertConverter()
