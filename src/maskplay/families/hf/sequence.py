"""The HuggingFace sequence classifiers a fine-tuned maskplay model (maskplay.tasks.finetune's FineTuned) converts to
and from: their weight names, configs and the maskplay backbone each reads into (the FineTuned model itself is
built by maskplay.tasks.finetune.convert, a task-layer module).

BertForSequenceClassification = BertModel + pooler (Dense + tanh on [CLS]) + Dropout + Linear: a FineTuned bert
(or unilm: the same weights, read bidirectionally) with head "bert" and pooling "first".
ElectraForSequenceClassification = ElectraModel + ElectraClassificationHead (Dropout, Dense, GELU, Dropout,
Linear on the first token): a FineTuned electra with head "electra" and pooling "first".
Other heads and poolings (the default "linear" head, mean / last pooling) have no HuggingFace twin."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from ...config import ModelConfig
from ..base import MaskplayModel
from ..bert import BertMLM
from ..electra import Electra
from .bert import BERT_LAYERS, BERT_TOP, bert_config_dict, config_from_hf_bert
from .common import BERT_DEFAULTS, ELECTRA_BUFFERS, ELECTRA_DEFAULTS, HF_BUFFERS, from_hf_keys, to_hf_keys
from .electra import ELECTRA_EMBEDDINGS, ELECTRA_LAYERS, config_from_hf_electra, electra_config_dict


class SequenceConverter:
    """One HuggingFace sequence classifier: the maskplay families whose fine-tuned models it twins, the
    FineTuned head it needs (`head`, with pooling "first"), its weight names and config."""

    architecture = ""
    families: tuple[str, ...] = ()
    head = ""
    hf_defaults: dict[str, Any] = {}
    _top: dict[str, str] = {}
    _layers = ""

    def check(self, config: ModelConfig) -> None:
        """Refuse a backbone config HuggingFace's class cannot hold."""

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        raise NotImplementedError

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        """config.json of the backbone (the classifier's fields are added by the caller)."""
        raise NotImplementedError

    def backbone(self, config: ModelConfig) -> MaskplayModel:
        raise NotImplementedError

    def state_from_hf(self, hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
        """The classifier's weights as a FineTuned model's, the backbone's at the top level (finetuned_state)."""
        return from_hf_keys(hf_state, self._top, self._layers, skip=(*HF_BUFFERS, *ELECTRA_BUFFERS))

    def state_to_hf(self, state: dict[str, Tensor]) -> dict[str, Tensor]:
        return to_hf_keys(state, self._top, self._layers)


class BertSequenceConverter(SequenceConverter):
    architecture = "BertForSequenceClassification"
    families = ("bert", "unilm")
    head = "bert"
    hf_defaults = {**BERT_DEFAULTS, "classifier_dropout": None}
    _top = {**{k: v for k, v in BERT_TOP.items() if k.startswith("bert.")},
            "bert.pooler.dense": "classifier.dense", "classifier": "classifier.out"}
    _layers = BERT_LAYERS

    def check(self, config: ModelConfig) -> None:
        if config.embedding_size is not None:
            raise ValueError("BertForSequenceClassification has no embedding_size: this bert has one")

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        return config_from_hf_bert(hf_config)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return bert_config_dict(dataclasses.replace(config, family="bert", unilm=type(config.unilm)()))

    def backbone(self, config: ModelConfig) -> MaskplayModel:
        return BertMLM(config)


class ElectraSequenceConverter(SequenceConverter):
    architecture = "ElectraForSequenceClassification"
    families = ("electra",)
    head = "electra"
    hf_defaults = {**ELECTRA_DEFAULTS, "classifier_dropout": None}
    _top = {**ELECTRA_EMBEDDINGS, "classifier.dense": "classifier.dense", "classifier.out_proj": "classifier.out"}
    _layers = ELECTRA_LAYERS

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        return config_from_hf_electra(hf_config)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return electra_config_dict(config)

    def backbone(self, config: ModelConfig) -> MaskplayModel:
        return Electra(config)


_SEQUENCE: dict[str, SequenceConverter] = {c.architecture: c for c in (BertSequenceConverter(),
                                                                        ElectraSequenceConverter())}
SEQUENCE_ARCHITECTURES = tuple(_SEQUENCE)


def sequence_converter(architecture: str) -> SequenceConverter:
    """The converter of a HuggingFace sequence classifier, or a ValueError naming the supported ones."""
    converter = _SEQUENCE.get(architecture)
    if converter is None:
        raise ValueError(f"HuggingFace architecture {architecture!r} is not a supported sequence classifier; "
                         f"supported: {list(SEQUENCE_ARCHITECTURES)}")
    return converter


def sequence_converter_of(model: Any) -> SequenceConverter:
    """The converter of a FineTuned model's HuggingFace twin, or a ValueError saying why it has none."""
    config, head = model.config, model.head_config
    family = config.family
    found = [c for c in _SEQUENCE.values() if family in c.families]
    if not found:
        raise ValueError(f"a fine-tuned {family} model has no HuggingFace sequence-classification twin (bert, unilm and "
                         "electra do)")
    converter = found[0]
    converter.check(config)
    if head.head != converter.head or head.pooling != "first":
        raise ValueError(f"{converter.architecture} reads the first token through its own head: fine-tune with --head "
                         f"{converter.head} --pooling first to export (this model: head {head.head!r}, pooling "
                         f"{head.pooling!r})")
    return converter


def sequence_classification_architecture(model: Any) -> str:
    """The HuggingFace twin of a FineTuned model, or a ValueError saying why it has none."""
    return sequence_converter_of(model).architecture


def finetuned_state(model: Any) -> dict[str, Tensor]:
    """A FineTuned model's weights with the backbone's at the top level (as a MaskplayModel's) + classifier.*."""
    return {(k[len("backbone."):] if k.startswith("backbone.") else k): v for k, v in model.state_dict().items()}
