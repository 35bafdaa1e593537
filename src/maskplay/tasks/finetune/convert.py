"""A fine-tuned maskplay model (maskplay.tasks.finetune's FineTuned) <-> HuggingFace BertForSequenceClassification /
ElectraForSequenceClassification. The classes' weight names and configs are families/hf/sequence.py's; this
task-layer module builds and reads the FineTuned model around them."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from ...families.hf.sequence import finetuned_state, sequence_converter, sequence_converter_of
from . import FineTuned, HeadConfig


def finetuned_to_hf_sequence_classification(model: Any) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(config.json dict, state dict) of the BertForSequenceClassification / ElectraForSequenceClassification a
    FineTuned model (maskplay.tasks.finetune) becomes; its logits equal HuggingFace's."""
    converter = sequence_converter_of(model)
    config, head = model.config, model.head_config
    out = converter.state_to_hf(finetuned_state(model))
    data = converter.config_to_hf(config)
    labels = head.labels if head.objective == "classify" else ["score"]
    data.update(architectures=[converter.architecture], num_labels=len(labels), classifier_dropout=head.dropout,
                id2label={str(i): name for i, name in enumerate(labels)},
                label2id={name: i for i, name in enumerate(labels)},
                problem_type="single_label_classification" if head.objective == "classify" else "regression")
    return data, out


def finetuned_from_hf_sequence_classification(architecture: str, hf_config: Any, hf_state: dict[str, Tensor],
                                              special_ids: dict[str, Any] | None = None,
                                              source: str = "config.json") -> FineTuned:
    """The FineTuned model (maskplay.tasks.finetune) of a HuggingFace BertForSequenceClassification /
    ElectraForSequenceClassification (config, state dict), weights loaded strictly. A regression model
    (problem_type "regression", or num_labels 1) gets the regress objective; a classifier its id2label names."""
    converter = sequence_converter(architecture)
    num_labels = int(getattr(hf_config, "num_labels", None) or len(getattr(hf_config, "id2label", {}) or {}) or 2)
    regress = getattr(hf_config, "problem_type", None) == "regression" or num_labels == 1
    if getattr(hf_config, "problem_type", None) == "multi_label_classification":
        raise ValueError("multi_label_classification has no maskplay counterpart (one label per input)")
    id2label = getattr(hf_config, "id2label", None) or {}
    labels = [] if regress else [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(num_labels)]
    dropout = getattr(hf_config, "classifier_dropout", None)
    dropout = hf_config.hidden_dropout_prob if dropout is None else dropout
    config = converter.config_from_hf(hf_config)
    if special_ids:
        config = dataclasses.replace(config, **special_ids)
    head = HeadConfig(objective="regress" if regress else "classify", labels=labels, pooling="first",
                      head=converter.head, dropout=dropout)
    model = FineTuned(converter.backbone(config), head)
    converted = converter.state_from_hf(hf_state)
    want = converter.state_to_hf(finetuned_state(model))
    missing = sorted(set(want) - set(hf_state))
    if missing:
        raise ValueError(f"the {architecture} checkpoint is missing weights: {missing}")
    state = {f"backbone.{k}" if not k.startswith("classifier.") else k: v for k, v in converted.items()}
    _check_shapes(model, state, source, num_labels)
    model.load_state_dict(state, strict=True)
    return model.eval()


def _check_shapes(model: FineTuned, state: dict[str, Tensor], source: str, num_labels: int) -> None:
    """A weight whose shape is not the one `source` (config.json) implies is a ValueError naming both, e.g. a
    config saying 3 labels beside a classifier of 2 rows, instead of load_state_dict's size-mismatch traceback."""
    own = model.state_dict()
    for key, value in state.items():
        if key in own and tuple(own[key].shape) != tuple(value.shape):
            labels = f" (num_labels / id2label: {num_labels})" if key.startswith("classifier.") else ""
            raise ValueError(f"{source}{labels} implies {key} of shape {tuple(own[key].shape)}, but the weights "
                             f"hold {tuple(value.shape)}: the config and the weights disagree")
