"""The HuggingFace converters by architecture and by maskplay family (families/hf/__init__.py registers them, in
the order their architectures are listed), and the conversions that look a converter up there."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

from .common import HFCheckpoint, HFConverter, HFExport, check_hf_sizes

if TYPE_CHECKING:
    from ..base import MaskplayModel

_BY_ARCHITECTURE: dict[str, HFConverter] = {}
_BY_FAMILY: dict[str, HFConverter] = {}


def register(converter: HFConverter) -> HFConverter:
    """Make `converter` the one for each of its architectures, and for its family when it is the family's twin
    (`converter.twin`; the read-only ones, HuggingFace's causal LMs onto gpt, are not)."""
    for architecture in converter.architectures:
        _BY_ARCHITECTURE[architecture] = converter
    if converter.twin:  # the first twin is the family's export (RoBERTa, ALBERT, ... read into a bert: BERT's)
        _BY_FAMILY.setdefault(converter.family, converter)
    return converter


def architectures() -> tuple[str, ...]:
    """The HuggingFace architectures from_hf reads, in registration order."""
    return tuple(_BY_ARCHITECTURE)


def converted_families() -> tuple[str, ...]:
    """The maskplay families with a HuggingFace twin (a converter), in registration order."""
    return tuple(_BY_FAMILY)


def converter_for_architecture(architecture: str) -> HFConverter:
    converter = _BY_ARCHITECTURE.get(architecture)
    if converter is None:
        raise ValueError(f"HuggingFace architecture {architecture!r} is not supported; supported: "
                         f"{list(architectures())}")
    return converter


def from_hf(architecture: str, checkpoint: HFCheckpoint, generator: HFCheckpoint | None = None,
            special_ids: dict[str, Any] | None = None) -> MaskplayModel:
    """The maskplay model of a HuggingFace checkpoint (architectures()), weights loaded strictly; `generator` (an
    ElectraForMaskedLM) goes with an ElectraForPreTraining and gives a full Electra; a BertLMHeadModel gives a GPT.
    `special_ids` (ModelConfig fields: the tokenizer's, Tokenizer.model_config_ids) replace the bert-base-uncased
    layout HF configs imply."""
    converter = converter_for_architecture(architecture)
    if generator is not None and architecture not in converter.takes_generator:
        raise ValueError(f"a generator goes with an ElectraForPreTraining discriminator, not a {architecture}")
    try:  # the sizes, before the converter builds anything
        config = converter.config_from_hf(checkpoint[0])
    except (NotImplementedError, ValueError):  # no config of its own here (special_ids not applied): from_hf says
        config = None
    if config is not None:
        check_hf_sizes(config, checkpoint[1])
    return converter.from_hf(architecture, checkpoint, generator, special_ids)


def to_hf(model: MaskplayModel) -> list[HFExport]:
    """(config.json dict, state dict) for each HuggingFace model `model` becomes: one, or for an Electra with a
    generator two (the discriminator, then the generator). A GPT becomes a BertLMHeadModel."""
    config = model.config
    changes = config.architecture_changes()
    if changes:  # the HuggingFace classes are the families' default architectures only
        raise ValueError(f"{', '.join(changes)}: this architecture switch has no HuggingFace {config.family} "
                         "counterpart (only the family's default architecture converts)")
    converter = _BY_FAMILY.get(config.family)
    if converter is None:
        raise ValueError(f"family {config.family!r} has no HuggingFace counterpart (bert, electra, gpt and xlnet do)")
    return converter.to_hf(model)


def check_complete(model: MaskplayModel, states: list[dict[str, Tensor]], names: list[str],
                   optional: frozenset[str]) -> None:
    """Name a weight the HuggingFace checkpoint lacks by its HuggingFace name (load_strict would name the
    maskplay one): the names a complete checkpoint has are those to_hf writes; `optional` ones (tied copies
    HuggingFace may leave out) may be missing."""
    for state, (_, want), name in zip(states, to_hf(model), names, strict=True):
        missing = sorted(set(want) - set(state) - optional)
        if missing:
            raise ValueError(f"the {name} checkpoint is missing weights: {missing}")


def hf_architecture(data: dict[str, Any], state: dict[str, Tensor], source: Path | str) -> str:
    """The class config.json (`data`, read from `source`) names; without `architectures`, the converters tell
    it by model_type, is_decoder and the head's weights. is_decoder makes any BERT or ELECTRA causal, so only a
    decoder architecture (BertLMHeadModel, maskplay's gpt) may have it."""
    named = data.get("architectures") or []
    known = [a for a in named if a in _BY_ARCHITECTURE]
    if named and not known:
        raise ValueError(f"{source}: architecture {named[0]!r} is not supported; supported: {list(architectures())}")
    model_type = data.get("model_type")
    decoder = bool(data.get("is_decoder", False))
    if known:
        if decoder and not _BY_ARCHITECTURE[known[0]].decoder:
            raise ValueError(f"{source}: a {known[0]} with is_decoder = true attends causally, which its maskplay "
                             "counterpart does not; only a BertLMHeadModel (maskplay gpt) may be a decoder")
        return known[0]
    for converter in dict.fromkeys(_BY_ARCHITECTURE.values()):
        found = converter.recognise(data, state)
        if found is not None:
            return found
    if decoder:
        raise ValueError(f"{source}: model_type {model_type!r} with is_decoder = true: only a BERT decoder "
                         "(BertLMHeadModel, maskplay gpt) converts")
    raise ValueError(f"{source}: cannot tell the architecture (no 'architectures', model_type {model_type!r}); "
                     f"supported: {list(architectures())}")
