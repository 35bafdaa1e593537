"""Deprecated: the weight converters' old address. They live in maskplay.families.hf (from_hf, to_hf, the registry;
one module per family: families.hf.bert, .electra, .gpt, .xlnet, .sequence) and, for fine-tuned sequence
classifiers, maskplay.finetune_convert (docs/CONVERT.md). Importing a name from here still works and warns
(DeprecationWarning) with its new module."""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

from . import finetune_convert
from .families import hf
from .families.hf import bert, electra, gpt, sequence, xlnet


def _names(module: ModuleType, *names: str) -> dict[str, ModuleType]:
    return dict.fromkeys(names, module)


MOVED: dict[str, ModuleType] = {
    **_names(hf, "ARCHITECTURES", "SEQUENCE_ARCHITECTURES", "HFCheckpoint", "from_hf", "hf_config_dict",
             "hf_electra_config", "to_hf"),
    **_names(bert, "config_from_hf_bert", "hf_bert_to_maskplay", "maskplay_to_hf_bert"),
    **_names(electra, "config_from_hf_electra", "hf_electra_discriminator_to_maskplay", "hf_electra_embeddings_equal",
             "hf_electra_generator_to_maskplay", "hf_electra_pair_to_maskplay", "maskplay_to_hf_electra",
             "maskplay_to_hf_electra_discriminator", "maskplay_to_hf_electra_generator"),
    **_names(gpt, "config_from_hf_bert_lm_head", "gpt_from_hf_bert_lm_head", "gpt_to_hf_bert_lm_head",
             "hf_bert_lm_head_config_dict", "hf_bert_lm_head_to_maskplay", "maskplay_to_hf_bert_lm_head"),
    **_names(sequence, "sequence_classification_architecture"),
    **_names(xlnet, "XLNET_SPECIAL_IDS", "config_from_hf_xlnet", "hf_xlnet_config_dict", "hf_xlnet_to_maskplay",
             "maskplay_to_hf_xlnet"),
    **_names(finetune_convert, "finetuned_from_hf_sequence_classification",
             "finetuned_to_hf_sequence_classification"),
}


def moved(old: str, table: dict[str, ModuleType], name: str) -> Any:
    """`name` of the deprecated module `old`, from its new module, with a DeprecationWarning saying where."""
    if name not in table:
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    warnings.warn(f"{old} is deprecated: import {name} from {table[name].__name__}", DeprecationWarning, stacklevel=3)
    return getattr(table[name], name)


def __getattr__(name: str) -> Any:
    return moved("maskplay.convert", MOVED, name)
