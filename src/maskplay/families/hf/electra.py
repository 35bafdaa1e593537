"""HuggingFace ELECTRA <-> maskplay:

- ElectraForPreTraining (the discriminator) <-> Electra with electra.generator = false;
- ElectraForMaskedLM (the generator) <-> BertMLM with embedding_size;
- the pair <-> a full Electra, its generator sized by electra.generator_hidden_fraction."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from ...config import ModelConfig
from ..base import MaskplayModel
from ..bert import BertMLM
from ..electra import Electra, ElectraConfig, generator_config, generator_sizes
from .common import (
    ELECTRA_BUFFERS,
    ELECTRA_DEFAULTS,
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
from .registry import check_complete

ELECTRA_EMBEDDINGS = {
    "electra.embeddings.word_embeddings": "embeddings.word",
    "electra.embeddings.position_embeddings": "embeddings.position",
    "electra.embeddings.token_type_embeddings": "embeddings.segment",
    "electra.embeddings.LayerNorm": "embeddings.norm",
    "electra.embeddings_project": "embeddings_project",
}
_DISCRIMINATOR_TOP = {
    **ELECTRA_EMBEDDINGS,
    "discriminator_predictions.dense": "head.dense",
    "discriminator_predictions.dense_prediction": "head.out",
}
_GENERATOR_TOP = {
    **ELECTRA_EMBEDDINGS,
    "generator_predictions.dense": "head.dense",
    "generator_predictions.LayerNorm": "head.norm",
    "generator_lm_head": "head",  # generator_lm_head.bias -> head.bias; its weight is the tied word embeddings
}
ELECTRA_LAYERS = "electra.encoder.layer"
_ELECTRA_WORD = "electra.embeddings.word_embeddings.weight"
ELECTRA_DECODER = "generator_lm_head.weight"
# what ElectraEmbeddings holds: equal in both towers of a pair <=> maskplay's tie_embeddings
_ELECTRA_EMBEDDING_KEYS = ("electra.embeddings.word_embeddings.weight", "electra.embeddings.position_embeddings.weight",
                           "electra.embeddings.token_type_embeddings.weight", "electra.embeddings.LayerNorm.weight",
                           "electra.embeddings.LayerNorm.bias")

# ---- weights ----------------------------------------------------------------------------------------------


def hf_electra_discriminator_to_maskplay(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """An ElectraForPreTraining state dict -> that of an Electra with electra.generator = false."""
    return from_hf_keys(hf_state, _DISCRIMINATOR_TOP, ELECTRA_LAYERS, skip=ELECTRA_BUFFERS)


def hf_electra_generator_to_maskplay(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """An ElectraForMaskedLM state dict -> that of a BertMLM with embedding_size. generator_lm_head.weight, when
    present, must equal the word embeddings (maskplay's decoder is that table)."""
    out = from_hf_keys(hf_state, _GENERATOR_TOP, ELECTRA_LAYERS, skip=(*ELECTRA_BUFFERS, ELECTRA_DECODER))
    check_tied(hf_state, ELECTRA_DECODER, _ELECTRA_WORD)
    return out


def hf_electra_embeddings_equal(discriminator: dict[str, Tensor], generator: dict[str, Tensor],
                                keys: tuple[str, ...] = _ELECTRA_EMBEDDING_KEYS) -> bool:
    """Whether the two towers' embedding tables and LayerNorm are identical: the pair then converts to a
    maskplay Electra with tie_embeddings = true."""
    for key in keys:
        a, b = discriminator.get(key), generator.get(key)
        if a is None or b is None or a.shape != b.shape or not torch.equal(a, b):
            return False
    return True


def hf_electra_pair_to_maskplay(discriminator: dict[str, Tensor], generator: dict[str, Tensor],
                                tie_embeddings: bool) -> dict[str, Tensor]:
    """ElectraForPreTraining + ElectraForMaskedLM state dicts -> a full Electra's. Tied, the embeddings are
    stored once (under embeddings.*) and the generator's must equal them; untied, the generator keeps its own
    under generator.embeddings.*."""
    out = hf_electra_discriminator_to_maskplay(discriminator)
    gen = hf_electra_generator_to_maskplay(generator)
    if tie_embeddings:
        differ = [k for k in _ELECTRA_EMBEDDING_KEYS if not hf_electra_embeddings_equal(discriminator, generator, (k,))]
        if differ:
            raise ValueError(f"electra.tie_embeddings: the generator's embeddings differ from the discriminator's: "
                             f"{differ}")
        gen = {k: v for k, v in gen.items() if not k.startswith("embeddings.")}
    out.update({f"generator.{k}": v for k, v in gen.items()})
    return out


def maskplay_to_hf_electra_discriminator(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """An Electra state dict without generator -> ElectraForPreTraining's."""
    return to_hf_keys(state, _DISCRIMINATOR_TOP, ELECTRA_LAYERS)


def maskplay_to_hf_electra_generator(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A BertMLM state dict (any embedding_size) -> ElectraForMaskedLM's, the tied decoder written out."""
    out = to_hf_keys(state, _GENERATOR_TOP, ELECTRA_LAYERS)
    out[ELECTRA_DECODER] = out[_ELECTRA_WORD]
    return out


def maskplay_to_hf_electra(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor] | None]:
    """A full Electra state dict -> (ElectraForPreTraining's, ElectraForMaskedLM's); the second is None for a
    discriminator alone. Tied embeddings are written into both, as each HuggingFace model holds its own."""
    disc = {k: v for k, v in state.items() if not k.startswith("generator.")}
    gen = {k[len("generator."):]: v for k, v in state.items() if k.startswith("generator.")}
    if not gen:
        return maskplay_to_hf_electra_discriminator(disc), None
    if not any(k.startswith("embeddings.") for k in gen):
        gen.update({k: v for k, v in disc.items() if k.startswith("embeddings.")})
    return maskplay_to_hf_electra_discriminator(disc), maskplay_to_hf_electra_generator(gen)


# ---- configs ----------------------------------------------------------------------------------------------

# Fields a generator must share with its discriminator: maskplay builds both from one config.
_SHARED_FIELDS = ("vocab_size", "num_hidden_layers", "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
                  "hidden_dropout_prob", "attention_probs_dropout_prob", "pad_token_id")


def config_from_hf_electra(discriminator: Any | None = None, generator: Any | None = None, *,
                           tie_embeddings: bool = True) -> ModelConfig:
    """The maskplay config for transformers.ElectraConfig(s): a discriminator alone -> Electra with
    electra.generator = false; a generator alone -> BertMLM with embedding_size; both -> a full Electra whose
    generator_hidden_fraction is the ratio of the hidden sizes (heads and FFN must scale with it, as
    families.electra.generator_sizes computes them)."""
    if discriminator is None and generator is None:
        raise ValueError("config_from_hf_electra needs a discriminator config, a generator config, or both")
    for hf_config, what in ((discriminator, "the ELECTRA discriminator"), (generator, "the ELECTRA generator")):
        if hf_config is not None:
            check_supported(hf_config, what)
    if generator is not None and getattr(generator, "tie_word_embeddings", True) is False:
        raise ValueError("the ELECTRA generator has tie_word_embeddings = false: maskplay's generator decoder is "
                         "always its word-embedding table")
    if discriminator is None:
        return ModelConfig(family="bert", embedding_size=generator.embedding_size, **backbone_fields(generator))
    fields = backbone_fields(discriminator)
    if generator is None:
        return ModelConfig(family="electra", embedding_size=discriminator.embedding_size,
                           electra=ElectraConfig(generator=False), **fields)
    _check_pair(discriminator, generator)
    fraction = generator.hidden_size / discriminator.hidden_size
    config = ModelConfig(family="electra", embedding_size=discriminator.embedding_size,
                         electra=ElectraConfig(generator_hidden_fraction=fraction, tie_embeddings=tie_embeddings),
                         **fields)
    want = generator_sizes(config)
    got = {"hidden_size": generator.hidden_size, "num_heads": generator.num_attention_heads,
           "intermediate_size": generator.intermediate_size}
    if want != got:
        raise ValueError(f"electra.generator_hidden_fraction = {fraction:.6g} (generator hidden / discriminator "
                         f"hidden) scales the discriminator to {want}, but the generator has {got}: maskplay's "
                         "generator scales heads and FFN width with the hidden size")
    return config


def _check_pair(discriminator: Any, generator: Any) -> None:
    """What one maskplay config cannot hold of a discriminator + generator pair."""
    differ = [f"{name}: discriminator {getattr(discriminator, name)} vs generator {getattr(generator, name)}"
              for name in _SHARED_FIELDS if getattr(discriminator, name) != getattr(generator, name)]
    if differ:
        raise ValueError(f"the ELECTRA generator and discriminator must agree on {'; '.join(differ)}")
    if discriminator.embedding_size != generator.embedding_size:
        raise ValueError(f"embedding_size: the discriminator's ({discriminator.embedding_size}) and the generator's "
                         f"({generator.embedding_size}) differ; maskplay's two towers share one embedding width")
    if generator.hidden_size > discriminator.hidden_size:
        raise ValueError(f"electra.generator_hidden_fraction: the generator (hidden_size {generator.hidden_size}) is "
                         f"larger than the discriminator ({discriminator.hidden_size}); the fraction must be <= 1")


def electra_config_dict(config: ModelConfig, generator: bool = False) -> dict[str, Any]:
    """config.json of the ElectraForPreTraining an Electra becomes (generator=True: its generator's
    ElectraForMaskedLM)."""
    if config.electra.all_tokens_mlm:
        raise ValueError("electra.all_tokens_mlm: the All-Tokens MLM head has no HuggingFace counterpart")
    if generator:
        if not config.electra.generator:
            raise ValueError("this ELECTRA model has no generator (electra.generator = false)")
        return bert_like_config_dict(generator_config(config), "ElectraForMaskedLM")  # a BertMLM with embedding_size
    return bert_like_config_dict(config, "ElectraForPreTraining")


# ---- the converter ----------------------------------------------------------------------------------------

class ElectraConverter(HFConverter):
    """Electra <-> ElectraForPreTraining (+ ElectraForMaskedLM for its generator); an ElectraForMaskedLM alone
    becomes a BertMLM with embedding_size (whose export is the bert converter's)."""

    family = "electra"
    architectures = ("ElectraForPreTraining", "ElectraForMaskedLM")
    hf_defaults = ELECTRA_DEFAULTS
    takes_generator = ("ElectraForPreTraining",)

    def recognise(self, data: dict[str, Any], state: dict[str, Tensor]) -> str | None:
        if data.get("model_type") != "electra" or data.get("is_decoder", False):
            return None
        if any(k.startswith("discriminator_predictions.") for k in state):
            return "ElectraForPreTraining"
        if any(k.startswith("generator_predictions.") for k in state):
            return "ElectraForMaskedLM"
        return None

    def describe(self, architecture: str, model: MaskplayModel, paired: bool = False) -> str:
        if paired:
            tied = "tied" if model.config.electra.tie_embeddings else "untied"
            return (f"electra (discriminator + generator at {model.config.electra.generator_hidden_fraction:.4g} of "
                    f"its hidden size, {tied} embeddings)")
        if architecture == "ElectraForMaskedLM":
            return f"bert (an ELECTRA generator, embedding_size {model.config.embedding_size})"
        return "electra (discriminator alone)"

    def from_hf(self, architecture: str, checkpoint: HFCheckpoint, generator: HFCheckpoint | None = None,
                special_ids: dict[str, Any] | None = None) -> MaskplayModel:
        hf_config, state = checkpoint
        states, names = [state], [architecture]
        if architecture == "ElectraForMaskedLM":
            config, converted = config_from_hf_electra(generator=hf_config), hf_electra_generator_to_maskplay(state)
        elif generator is None:
            config, converted = config_from_hf_electra(hf_config), hf_electra_discriminator_to_maskplay(state)
        else:
            gen_config, gen_state = generator
            tied = hf_electra_embeddings_equal(state, gen_state)
            config = config_from_hf_electra(hf_config, gen_config, tie_embeddings=tied)
            converted = hf_electra_pair_to_maskplay(state, gen_state, tied)
            states, names = [state, gen_state], [architecture, "ElectraForMaskedLM (generator)"]
        if special_ids:
            config = dataclasses.replace(config, **special_ids)
        model = (BertMLM if architecture == "ElectraForMaskedLM" else Electra)(config)
        check_complete(model, states, names, OPTIONAL_HF_KEYS)
        model.load_strict(converted, source=f"the converted {' + '.join(names)} weights")
        return model.eval()

    def to_hf(self, model: MaskplayModel) -> list[HFExport]:
        config = model.config
        electra_config_dict(config)  # an unsupported option (all_tokens_mlm) is named before the weights are
        disc, gen = maskplay_to_hf_electra(model.state_dict())
        out = [(electra_config_dict(config), disc)]
        if gen is not None:
            out.append((electra_config_dict(config, generator=True), gen))
        return out

    def config_from_hf(self, hf_config: Any, generator: Any | None = None, *,
                       tie_embeddings: bool = True) -> ModelConfig:
        return config_from_hf_electra(hf_config, generator, tie_embeddings=tie_embeddings)

    def config_to_hf(self, config: ModelConfig, generator: bool = False) -> dict[str, Any]:
        return electra_config_dict(config, generator)


ELECTRA = ElectraConverter()
