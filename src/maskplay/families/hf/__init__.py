"""HuggingFace <-> maskplay converters, one per family with a HuggingFace twin (bert, electra, gpt, xlnet; the
fine-tuned sequence classifiers in sequence.py). Every source weight must land somewhere and every target
weight must be filled: nothing is silently skipped.

- BertForMaskedLM <-> BertMLM;
- ElectraForPreTraining (the discriminator) <-> Electra with electra.generator = false;
- ElectraForMaskedLM (the generator) <-> BertMLM with embedding_size;
- the pair <-> a full Electra, its generator sized by electra.generator_hidden_fraction;
- BertLMHeadModel (is_decoder=True) <-> GPT;
- XLNetLMHeadModel <-> XLNet;
- RobertaForMaskedLM, XLMRobertaForMaskedLM, DistilBertForMaskedLM, AlbertForMaskedLM, DebertaV2ForMaskedLM ->
  BertMLM with switches (roberta.py, distilbert.py, albert.py, deberta.py over masked.py; read only).

directory.py reads a HuggingFace directory (headless encoders too) as a model in memory, for
MaskplayModel.from_pretrained.
- GPT2LMHeadModel, GPTNeoXForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM, OPTForCausalLM -> GPT with the causal-LM
  switches (docs/guides/switches.md), read only (causal.py).

The registry (registry.py) maps each architecture and each family to its converter; from_hf, to_hf and
hf_architecture look them up there."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ..base import MaskplayModel
from .albert import ALBERT
from .bert import BERT, bert_config_dict
from .common import HF_DEFAULTS, HFCheckpoint, HFConverter, HFExport, check_hf_types
from .deberta import DEBERTA_V2
from .directory import load_hf_model
from .distilbert import DISTILBERT
from .electra import ELECTRA, electra_config_dict
from .gpt import GPT_CONVERTER
from .gpt2 import GPT2
from .gpt_neox import GPT_NEOX
from .llama import LLAMA
from .opt import OPT
from .qwen2 import QWEN2
from .registry import (
    architectures,
    check_complete,
    converted_families,
    converter_for_architecture,
    from_hf,
    hf_architecture,
    register,
    to_hf,
)
from .roberta import ROBERTA
from .sequence import SEQUENCE_ARCHITECTURES, sequence_converter
from .validate import check_hf_config
from .xlnet import XLNET

if TYPE_CHECKING:
    from ...config import ModelConfig

# this order is the order ARCHITECTURES lists; HuggingFace's causal LMs (read only, onto gpt) after the twins
for _converter in (BERT, ELECTRA, GPT_CONVERTER, XLNET, GPT2, GPT_NEOX, LLAMA, QWEN2, OPT):
    register(_converter)
# HuggingFace masked LMs read into a bert (registered after BERT, whose converter stays the
# family's export)
for _converter in (ROBERTA, DISTILBERT, ALBERT, DEBERTA_V2):
    register(_converter)

ARCHITECTURES = architectures()
MaskplayModel.hf_reader = load_hf_model  # MaskplayModel.from_pretrained reads HuggingFace directories with it


def hf_config(architecture: str, data: dict[str, Any], source: str = "config.json") -> SimpleNamespace:
    """A config.json's fields (`data`) as attributes, with what transformers assumes for the keys it leaves out
    (`architecture` from ARCHITECTURES or SEQUENCE_ARCHITECTURES). A value of the wrong type is a ValueError
    naming `source` and the key (validate.check_hf_config)."""
    check_hf_config(data, source)
    if architecture in SEQUENCE_ARCHITECTURES:
        defaults = sequence_converter(architecture).hf_defaults
    else:
        defaults = converter_for_architecture(architecture).hf_defaults
    return SimpleNamespace(**{**HF_DEFAULTS, **defaults, **data})


def describe_conversion(architecture: str, model: MaskplayModel, paired: bool = False) -> str:
    """What from_hf made of `architecture` (`paired`: with a generator), as `maskplay convert` reports it."""
    return converter_for_architecture(architecture).describe(architecture, model, paired)


def hf_config_dict(config: ModelConfig, generator: bool = False) -> dict[str, Any]:
    """config.json for HuggingFace: BertForMaskedLM for a BertMLM without embedding_size, ElectraForMaskedLM for
    one with it, ElectraForPreTraining for an Electra (its generator's ElectraForMaskedLM with generator=True)."""
    builders = {ELECTRA.family: electra_config_dict, BERT.family: bert_config_dict}
    build = builders.get(config.family)
    if build is None:
        raise ValueError(f"family {config.family!r} has no config here (bert and electra; a gpt's is "
                         "hf_bert_lm_head_config_dict)")
    return build(config, generator)


def hf_electra_config(config: ModelConfig, generator: bool = False) -> Any:
    """transformers.ElectraConfig for a maskplay Electra (its generator's with generator=True) or a BertMLM
    (as ElectraForMaskedLM, whatever its embedding_size)."""
    import transformers

    if config.family == BERT.family and config.embedding_size is None:
        config = dataclasses.replace(config, embedding_size=config.hidden_size)
    data = hf_config_dict(config, generator)
    data.pop("model_type")
    return transformers.ElectraConfig(**data)


__all__ = ["ARCHITECTURES", "BERT", "ELECTRA", "GPT_CONVERTER", "HF_DEFAULTS", "SEQUENCE_ARCHITECTURES", "XLNET",
           "HFCheckpoint", "HFConverter", "HFExport", "check_complete", "check_hf_types", "converted_families",
           "converter_for_architecture",
           "describe_conversion", "from_hf", "hf_architecture", "hf_config", "hf_config_dict", "hf_electra_config",
           "register", "sequence_converter", "to_hf"]
