"""HuggingFace BertLMHeadModel (is_decoder=True) <-> maskplay GPT. A BERT decoder is maskplay's GPT: the same
blocks and tied MLM head under a causal mask (bert4keras' LM_Mask). Its BertModel has no pooler, so the weight
names are BertForMaskedLM's and the BERT renaming serves both."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from ...config import ModelConfig
from ..base import MaskplayModel
from ..gpt import GPT
from .bert import bert_config_dict, hf_bert_to_maskplay, maskplay_to_hf_bert
from .common import BERT_DEFAULTS, OPTIONAL_HF_KEYS, HFCheckpoint, HFConverter, HFExport, backbone_fields, check_supported


def config_from_hf_bert_lm_head(hf_config: Any) -> ModelConfig:
    """The GPT config matching a transformers.BertConfig with is_decoder=True (BertLMHeadModel)."""
    check_supported(hf_config, "BertLMHeadModel")
    if not getattr(hf_config, "is_decoder", False):
        raise ValueError("BertLMHeadModel: is_decoder is false, so it attends both ways; maskplay GPT is causal "
                         "(set is_decoder=True, as HuggingFace requires for a standalone BertLMHeadModel)")
    if getattr(hf_config, "add_cross_attention", False):
        raise ValueError("BertLMHeadModel: add_cross_attention (an encoder-decoder's decoder) has no maskplay "
                         "counterpart")
    return ModelConfig(family="gpt", **backbone_fields(hf_config))


def hf_bert_lm_head_to_maskplay(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A BertLMHeadModel state dict -> GPT's (decoder tied, as for BertForMaskedLM)."""
    return hf_bert_to_maskplay(hf_state)


def maskplay_to_hf_bert_lm_head(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A GPT state dict -> BertLMHeadModel's, the tied decoder weight and bias written out."""
    return maskplay_to_hf_bert(state)


def hf_bert_lm_head_config_dict(config: ModelConfig) -> dict[str, Any]:
    """config.json of the BertLMHeadModel a maskplay GPT becomes."""
    if config.family != "gpt":
        raise ValueError(f"BertLMHeadModel is a GPT's counterpart, not a {config.family!r} model's")
    if config.embedding_size is not None:
        raise ValueError("BertLMHeadModel has no embedding_size: a GPT with embedding_size has no HuggingFace "
                         "BERT counterpart")
    out = bert_config_dict(dataclasses.replace(config, family="bert"))
    out.update(architectures=["BertLMHeadModel"], is_decoder=True)
    return out


def gpt_from_hf_bert_lm_head(hf_config: Any, hf_state: dict[str, Tensor],
                             special_ids: dict[str, Any] | None = None) -> MaskplayModel:
    """The maskplay GPT of a BertLMHeadModel (config, state dict), weights loaded strictly; `special_ids` as for
    from_hf."""
    config = config_from_hf_bert_lm_head(hf_config)
    if special_ids:
        config = dataclasses.replace(config, **special_ids)
    model = GPT(config)
    want = maskplay_to_hf_bert_lm_head(model.state_dict())
    missing = sorted(set(want) - set(hf_state) - OPTIONAL_HF_KEYS)
    if missing:
        raise ValueError(f"the BertLMHeadModel checkpoint is missing weights: {missing}")
    model.load_strict(hf_bert_lm_head_to_maskplay(hf_state), source="the converted BertLMHeadModel weights")
    return model.eval()


def gpt_to_hf_bert_lm_head(model: MaskplayModel) -> HFExport:
    """(config.json dict, state dict) of the BertLMHeadModel a maskplay GPT becomes."""
    config = hf_bert_lm_head_config_dict(model.config)
    return config, maskplay_to_hf_bert_lm_head(model.state_dict())


class GPTConverter(HFConverter):
    """GPT <-> BertLMHeadModel (is_decoder = true)."""

    family = "gpt"
    architectures = ("BertLMHeadModel",)
    hf_defaults = BERT_DEFAULTS
    decoder = True

    def recognise(self, data: dict[str, Any], state: dict[str, Tensor]) -> str | None:
        if data.get("model_type") == "bert" and data.get("is_decoder", False):
            return "BertLMHeadModel"
        return None

    def describe(self, architecture: str, model: MaskplayModel, paired: bool = False) -> str:
        return "gpt (a BERT decoder)"

    def from_hf(self, architecture: str, checkpoint: HFCheckpoint, generator: HFCheckpoint | None = None,
                special_ids: dict[str, Any] | None = None) -> MaskplayModel:
        return gpt_from_hf_bert_lm_head(*checkpoint, special_ids)

    def to_hf(self, model: MaskplayModel) -> list[HFExport]:
        return [gpt_to_hf_bert_lm_head(model)]

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        return config_from_hf_bert_lm_head(hf_config)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return hf_bert_lm_head_config_dict(config)


GPT_CONVERTER = GPTConverter()
