"""Weight converters between HuggingFace BERT / ELECTRA and maskplay. Every source weight must land somewhere and
every target weight must be filled: nothing is silently skipped.

- BertForMaskedLM <-> BertMLM;
- ElectraForPreTraining (the discriminator) <-> Electra with electra.generator = false;
- ElectraForMaskedLM (the generator) <-> BertMLM with embedding_size;
- the pair <-> a full Electra, its generator sized by electra.generator_hidden_fraction;
- BertLMHeadModel (is_decoder=True) <-> GPT;
- XLNetLMHeadModel <-> XLNet (convert_xlnet.py)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .config import ElectraConfig, ModelConfig

if TYPE_CHECKING:
    from .families import MaskplayModel

# HuggingFace buffers that are not weights (present in some transformers versions' state dicts).
_HF_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")
_ELECTRA_BUFFERS = ("electra.embeddings.position_ids", "electra.embeddings.token_type_ids")

_LAYER = {
    "attention.self.query": "attn.query",
    "attention.self.key": "attn.key",
    "attention.self.value": "attn.value",
    "attention.output.dense": "attn.out",
    "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
}
_TOP = {
    "bert.embeddings.word_embeddings": "embeddings.word",
    "bert.embeddings.position_embeddings": "embeddings.position",
    "bert.embeddings.token_type_embeddings": "embeddings.segment",
    "bert.embeddings.LayerNorm": "embeddings.norm",
    "cls.predictions.transform.dense": "head.dense",
    "cls.predictions.transform.LayerNorm": "head.norm",
    "cls.predictions": "head",  # cls.predictions.bias -> head.bias
}
_ELECTRA_EMBEDDINGS = {
    "electra.embeddings.word_embeddings": "embeddings.word",
    "electra.embeddings.position_embeddings": "embeddings.position",
    "electra.embeddings.token_type_embeddings": "embeddings.segment",
    "electra.embeddings.LayerNorm": "embeddings.norm",
    "electra.embeddings_project": "embeddings_project",
}
_DISCRIMINATOR_TOP = {
    **_ELECTRA_EMBEDDINGS,
    "discriminator_predictions.dense": "head.dense",
    "discriminator_predictions.dense_prediction": "head.out",
}
_GENERATOR_TOP = {
    **_ELECTRA_EMBEDDINGS,
    "generator_predictions.dense": "head.dense",
    "generator_predictions.LayerNorm": "head.norm",
    "generator_lm_head": "head",  # generator_lm_head.bias -> head.bias; its weight is the tied word embeddings
}
_BERT_LAYERS = "bert.encoder.layer"
_ELECTRA_LAYERS = "electra.encoder.layer"
_BERT_WORD = "bert.embeddings.word_embeddings.weight"
_ELECTRA_WORD = "electra.embeddings.word_embeddings.weight"
_BERT_DECODER = "cls.predictions.decoder.weight"
_BERT_DECODER_BIAS = "cls.predictions.decoder.bias"
_ELECTRA_DECODER = "generator_lm_head.weight"
# what ElectraEmbeddings holds: equal in both towers of a pair <=> maskplay's tie_embeddings
_ELECTRA_EMBEDDING_KEYS = ("electra.embeddings.word_embeddings.weight", "electra.embeddings.position_embeddings.weight",
                           "electra.embeddings.token_type_embeddings.weight", "electra.embeddings.LayerNorm.weight",
                           "electra.embeddings.LayerNorm.bias")

ARCHITECTURES = ("BertForMaskedLM", "ElectraForPreTraining", "ElectraForMaskedLM", "BertLMHeadModel", "XLNetLMHeadModel")

# ---- renaming ---------------------------------------------------------------------------------------------


def _from_hf(hf_state: dict[str, Tensor], top: dict[str, str], layers: str, skip: tuple[str, ...]) -> dict[str, Tensor]:
    """Rename by `top` (module -> module) and by _LAYER under `layers`; the keys in `skip` (buffers, tied copies
    the caller checks) are dropped, anything else is an error naming the key."""
    out: dict[str, Tensor] = {}
    unknown = []
    for key, value in hf_state.items():
        if key in skip:
            continue
        module, _, leaf = key.rpartition(".")
        if module in top:
            out[f"{top[module]}.{leaf}"] = value
            continue
        if module.startswith(layers + "."):
            index, _, rest = module[len(layers) + 1:].partition(".")
            if index.isdigit() and rest in _LAYER:
                out[f"encoder.layers.{index}.{_LAYER[rest]}.{leaf}"] = value
                continue
        unknown.append(key)
    if unknown:
        raise ValueError(f"HuggingFace weights with no maskplay counterpart: {unknown}")
    return out


def _to_hf(state: dict[str, Tensor], top: dict[str, str], layers: str) -> dict[str, Tensor]:
    """The inverse of _from_hf; a maskplay key with no HuggingFace name is an error naming it."""
    inverse = {v: k for k, v in top.items()}
    layer = {v: k for k, v in _LAYER.items()}
    out: dict[str, Tensor] = {}
    unknown = []
    for key, value in _with_segment_table(state).items():
        module, _, leaf = key.rpartition(".")
        if module in inverse:
            out[f"{inverse[module]}.{leaf}"] = value
            continue
        if module.startswith("encoder.layers."):
            index, _, rest = module[len("encoder.layers."):].partition(".")
            if index.isdigit() and rest in layer:
                out[f"{layers}.{index}.{layer[rest]}.{leaf}"] = value
                continue
        unknown.append(key)
    if unknown:
        raise ValueError(f"maskplay weights with no HuggingFace counterpart: {unknown}")
    return out


def _with_segment_table(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """HuggingFace always adds a token-type embedding; a maskplay model without segments (type_vocab_size = 0)
    gets one row of zeros, which adds nothing (hf_config_dict says type_vocab_size = 1 to match)."""
    word = state.get("embeddings.word.weight")
    if word is None or "embeddings.segment.weight" in state:
        return state
    return {**state, "embeddings.segment.weight": word.new_zeros(1, word.shape[1])}


def _check_tied(hf_state: dict[str, Tensor], decoder: str, word: str) -> None:
    value = hf_state.get(decoder)
    if value is not None and (value.shape != hf_state[word].shape or not torch.equal(value, hf_state[word])):
        raise ValueError(f"{decoder} differs from the word embeddings ({word}): maskplay ties them")


# ---- BERT -------------------------------------------------------------------------------------------------


def hf_bert_to_maskplay(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Rename a BertForMaskedLM state dict to BertMLM's. The decoder must be tied to the word embeddings
    and its bias must be the head's bias; anything unrecognised is an error naming the key."""
    out = _from_hf(hf_state, _TOP, _BERT_LAYERS, skip=(*_HF_BUFFERS, _BERT_DECODER, _BERT_DECODER_BIAS))
    _check_tied(hf_state, _BERT_DECODER, _BERT_WORD)
    bias = hf_state.get(_BERT_DECODER_BIAS)
    if bias is not None and "cls.predictions.bias" in hf_state and not torch.equal(bias, hf_state["cls.predictions.bias"]):
        raise ValueError(f"{_BERT_DECODER_BIAS} differs from cls.predictions.bias")
    return out


def maskplay_to_hf_bert(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The inverse rename, with the tied decoder weight and bias written out as HuggingFace expects."""
    out = _to_hf(state, _TOP, _BERT_LAYERS)
    out[_BERT_DECODER] = state["embeddings.word.weight"]
    out[_BERT_DECODER_BIAS] = state["head.bias"]
    return out


# ---- ELECTRA ----------------------------------------------------------------------------------------------


def hf_electra_discriminator_to_maskplay(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """An ElectraForPreTraining state dict -> that of an Electra with electra.generator = false."""
    return _from_hf(hf_state, _DISCRIMINATOR_TOP, _ELECTRA_LAYERS, skip=_ELECTRA_BUFFERS)


def hf_electra_generator_to_maskplay(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """An ElectraForMaskedLM state dict -> that of a BertMLM with embedding_size. generator_lm_head.weight, when
    present, must equal the word embeddings (maskplay's decoder is that table)."""
    out = _from_hf(hf_state, _GENERATOR_TOP, _ELECTRA_LAYERS, skip=(*_ELECTRA_BUFFERS, _ELECTRA_DECODER))
    _check_tied(hf_state, _ELECTRA_DECODER, _ELECTRA_WORD)
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
    return _to_hf(state, _DISCRIMINATOR_TOP, _ELECTRA_LAYERS)


def maskplay_to_hf_electra_generator(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A BertMLM state dict (any embedding_size) -> ElectraForMaskedLM's, the tied decoder written out."""
    out = _to_hf(state, _GENERATOR_TOP, _ELECTRA_LAYERS)
    out[_ELECTRA_DECODER] = out[_ELECTRA_WORD]
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


def _check_supported(hf_config: Any, what: str) -> None:
    act = getattr(hf_config, "hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(f"{what}: only hidden_act='gelu' is supported, got {act!r}")
    position = getattr(hf_config, "position_embedding_type", None) or "absolute"
    if position != "absolute":
        raise ValueError(f"{what}: only absolute position embeddings are supported, got {position!r}")


def _backbone_fields(hf_config: Any) -> dict[str, Any]:
    """The ModelConfig fields a BERT-like HuggingFace config sets, special tokens in bert-base-uncased's layout
    ([PAD]=0 [UNK]=100 [CLS]=101 [SEP]=102 [MASK]=103), which ELECTRA's vocabulary shares."""
    vocab = hf_config.vocab_size
    return dict(
        vocab_size=vocab, hidden_size=hf_config.hidden_size, num_layers=hf_config.num_hidden_layers,
        num_heads=hf_config.num_attention_heads, intermediate_size=hf_config.intermediate_size,
        max_position=hf_config.max_position_embeddings, type_vocab_size=hf_config.type_vocab_size,
        hidden_dropout=hf_config.hidden_dropout_prob, attention_dropout=hf_config.attention_probs_dropout_prob,
        layer_norm_eps=hf_config.layer_norm_eps, initializer_range=hf_config.initializer_range,
        pad_token_id=hf_config.pad_token_id or 0,
        unk_token_id=min(100, vocab - 1), sos_token_id=min(101, vocab - 1), eos_token_id=min(102, vocab - 1),
        mask_token_id=103 if vocab > 103 else vocab - 1,
        special_token_ids=sorted({0, *(i for i in (100, 101, 102, 103) if i < vocab)}),
    )


def config_from_hf_bert(hf_config: Any) -> ModelConfig:
    """A BertMLM config matching a transformers.BertConfig."""
    _check_supported(hf_config, "BERT")
    return ModelConfig(family="bert", **_backbone_fields(hf_config))


# Fields a generator must share with its discriminator: maskplay builds both from one config.
_SHARED_FIELDS = ("vocab_size", "num_hidden_layers", "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
                  "hidden_dropout_prob", "attention_probs_dropout_prob", "pad_token_id")


def config_from_hf_electra(discriminator: Any | None = None, generator: Any | None = None, *,
                           tie_embeddings: bool = True) -> ModelConfig:
    """The maskplay config for transformers.ElectraConfig(s): a discriminator alone -> Electra with
    electra.generator = false; a generator alone -> BertMLM with embedding_size; both -> a full Electra whose
    generator_hidden_fraction is the ratio of the hidden sizes (heads and FFN must scale with it, as
    ModelConfig.generator_sizes computes them)."""
    if discriminator is None and generator is None:
        raise ValueError("config_from_hf_electra needs a discriminator config, a generator config, or both")
    for hf_config, what in ((discriminator, "the ELECTRA discriminator"), (generator, "the ELECTRA generator")):
        if hf_config is not None:
            _check_supported(hf_config, what)
    if generator is not None and getattr(generator, "tie_word_embeddings", True) is False:
        raise ValueError("the ELECTRA generator has tie_word_embeddings = false: maskplay's generator decoder is "
                         "always its word-embedding table")
    if discriminator is None:
        return ModelConfig(family="bert", embedding_size=generator.embedding_size, **_backbone_fields(generator))
    fields = _backbone_fields(discriminator)
    if generator is None:
        return ModelConfig(family="electra", embedding_size=discriminator.embedding_size,
                           electra=ElectraConfig(generator=False), **fields)
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
    fraction = generator.hidden_size / discriminator.hidden_size
    config = ModelConfig(family="electra", embedding_size=discriminator.embedding_size,
                         electra=ElectraConfig(generator_hidden_fraction=fraction, tie_embeddings=tie_embeddings),
                         **fields)
    want = config.generator_sizes()
    got = {"hidden_size": generator.hidden_size, "num_heads": generator.num_attention_heads,
           "intermediate_size": generator.intermediate_size}
    if want != got:
        raise ValueError(f"electra.generator_hidden_fraction = {fraction:.6g} (generator hidden / discriminator "
                         f"hidden) scales the discriminator to {want}, but the generator has {got}: maskplay's "
                         "generator scales heads and FFN width with the hidden size")
    return config


def hf_config_dict(config: ModelConfig, generator: bool = False) -> dict[str, Any]:
    """config.json for HuggingFace: BertForMaskedLM for a BertMLM without embedding_size, ElectraForMaskedLM for
    one with it, ElectraForPreTraining for an Electra (its generator's ElectraForMaskedLM with generator=True)."""
    if config.family == "electra":
        if config.electra.all_tokens_mlm:
            raise ValueError("electra.all_tokens_mlm: the All-Tokens MLM head has no HuggingFace counterpart")
        if generator:
            if not config.electra.generator:
                raise ValueError("this ELECTRA model has no generator (electra.generator = false)")
            from .families.electra import generator_config

            return hf_config_dict(generator_config(config))  # a BertMLM with embedding_size: ElectraForMaskedLM
        architecture = "ElectraForPreTraining"
    elif config.family == "bert":
        if generator:
            raise ValueError("a BertMLM has no separate generator")
        architecture = "BertForMaskedLM" if config.embedding_size is None else "ElectraForMaskedLM"
    else:
        raise ValueError(f"family {config.family!r} has no config here (bert and electra; a gpt's is "
                         "hf_bert_lm_head_config_dict)")
    out: dict[str, Any] = {
        "architectures": [architecture], "model_type": "bert" if architecture == "BertForMaskedLM" else "electra",
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size, "hidden_act": "gelu",
        "hidden_dropout_prob": config.hidden_dropout, "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_position, "type_vocab_size": max(1, config.type_vocab_size),
        "initializer_range": config.initializer_range, "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id, "position_embedding_type": "absolute", "tie_word_embeddings": True,
    }
    if out["model_type"] == "electra":
        out["embedding_size"] = config.embedding_width
    return out


def hf_electra_config(config: ModelConfig, generator: bool = False) -> Any:
    """transformers.ElectraConfig for a maskplay Electra (its generator's with generator=True) or a BertMLM
    (as ElectraForMaskedLM, whatever its embedding_size)."""
    import transformers

    if config.family == "bert" and config.embedding_size is None:
        config = dataclasses.replace(config, embedding_size=config.hidden_size)
    data = hf_config_dict(config, generator)
    data.pop("model_type")
    return transformers.ElectraConfig(**data)


# ---- models -----------------------------------------------------------------------------------------------

HFCheckpoint = tuple[Any, dict[str, Tensor]]  # (a HuggingFace config: attributes as in config.json, state dict)


def from_hf(architecture: str, checkpoint: HFCheckpoint, generator: HFCheckpoint | None = None,
            special_ids: dict[str, Any] | None = None) -> MaskplayModel:
    """The maskplay model of a HuggingFace checkpoint (ARCHITECTURES), weights loaded strictly; `generator` (an
    ElectraForMaskedLM) goes with an ElectraForPreTraining and gives a full Electra; a BertLMHeadModel gives a GPT.
    `special_ids` (ModelConfig fields: the tokenizer's, Tokenizer.model_config_ids) replace the bert-base-uncased
    layout HF configs imply."""
    from .families import BertMLM, Electra

    hf_config, state = checkpoint
    if architecture not in ARCHITECTURES:
        raise ValueError(f"HuggingFace architecture {architecture!r} is not supported; supported: {list(ARCHITECTURES)}")
    if generator is not None and architecture != "ElectraForPreTraining":
        raise ValueError(f"a generator goes with an ElectraForPreTraining discriminator, not a {architecture}")
    if architecture == "BertLMHeadModel":
        return gpt_from_hf_bert_lm_head(hf_config, state, special_ids)
    if architecture == "XLNetLMHeadModel":
        return _xlnet_from_hf(hf_config, state, special_ids)
    states, names = [state], [architecture]
    if architecture == "BertForMaskedLM":
        config, converted = config_from_hf_bert(hf_config), hf_bert_to_maskplay(state)
    elif architecture == "ElectraForMaskedLM":
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
    model = (Electra if config.family == "electra" else BertMLM)(config)
    _check_complete(model, states, names)
    model.load_strict(converted, source=f"the converted {' + '.join(names)} weights")
    return model.eval()


def _xlnet_from_hf(hf_config: Any, state: dict[str, Tensor], special_ids: dict[str, Any] | None) -> MaskplayModel:
    from .convert_xlnet import config_from_hf_xlnet, hf_xlnet_to_maskplay
    from .families import XLNet

    config = config_from_hf_xlnet(hf_config, special_ids)
    model = XLNet(config)
    model.load_strict(hf_xlnet_to_maskplay(state, config.num_layers), source="the converted XLNetLMHeadModel weights")
    return model.eval()


# Tied copies HuggingFace may leave out of a checkpoint (transformers 5 saves none of them).
_OPTIONAL_HF_KEYS = frozenset({_BERT_DECODER, _BERT_DECODER_BIAS, _ELECTRA_DECODER})


def _check_complete(model: MaskplayModel, states: list[dict[str, Tensor]], names: list[str]) -> None:
    """Name a weight the HuggingFace checkpoint lacks by its HuggingFace name (load_strict would name the
    maskplay one): the names a complete checkpoint has are those to_hf writes."""
    for state, (_, want), name in zip(states, to_hf(model), names, strict=True):
        missing = sorted(set(want) - set(state) - _OPTIONAL_HF_KEYS)
        if missing:
            raise ValueError(f"the {name} checkpoint is missing weights: {missing}")


def to_hf(model: MaskplayModel) -> list[tuple[dict[str, Any], dict[str, Tensor]]]:
    """(config.json dict, state dict) for each HuggingFace model `model` becomes: one, or for an Electra with a
    generator two (the discriminator, then the generator). A GPT becomes a BertLMHeadModel."""
    config, state = model.config, model.state_dict()
    changes = config.architecture_changes()
    if changes:  # the HuggingFace classes are the families' default architectures only
        raise ValueError(f"{', '.join(changes)}: this architecture switch has no HuggingFace {config.family} "
                         "counterpart (only the family's default architecture converts)")
    if config.family == "gpt":
        return [gpt_to_hf_bert_lm_head(model)]
    if config.family == "xlnet":
        from .convert_xlnet import hf_xlnet_config_dict, maskplay_to_hf_xlnet

        return [(hf_xlnet_config_dict(config), maskplay_to_hf_xlnet(state, config))]
    if config.family == "bert":
        head = maskplay_to_hf_bert(state) if config.embedding_size is None else maskplay_to_hf_electra_generator(state)
        return [(hf_config_dict(config), head)]
    if config.family != "electra":
        raise ValueError(f"family {config.family!r} has no HuggingFace counterpart (bert, electra, gpt and xlnet do)")
    hf_config_dict(config)  # an unsupported option (all_tokens_mlm) is named before the weights are
    disc, gen = maskplay_to_hf_electra(state)
    out = [(hf_config_dict(config), disc)]
    if gen is not None:
        out.append((hf_config_dict(config, generator=True), gen))
    return out


# ---- GPT <-> BertLMHeadModel (is_decoder=True) ------------------------------------------------------------
# A BERT decoder is maskplay's GPT: the same blocks and tied MLM head under a causal mask (bert4keras' LM_Mask).
# Its BertModel has no pooler, so the weight names are BertForMaskedLM's and the BERT renaming serves both.


def config_from_hf_bert_lm_head(hf_config: Any) -> ModelConfig:
    """The GPT config matching a transformers.BertConfig with is_decoder=True (BertLMHeadModel)."""
    _check_supported(hf_config, "BertLMHeadModel")
    if not getattr(hf_config, "is_decoder", False):
        raise ValueError("BertLMHeadModel: is_decoder is false, so it attends both ways; maskplay GPT is causal "
                         "(set is_decoder=True, as HuggingFace requires for a standalone BertLMHeadModel)")
    if getattr(hf_config, "add_cross_attention", False):
        raise ValueError("BertLMHeadModel: add_cross_attention (an encoder-decoder's decoder) has no maskplay "
                         "counterpart")
    return ModelConfig(family="gpt", **_backbone_fields(hf_config))


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
    out = hf_config_dict(dataclasses.replace(config, family="bert"))
    out.update(architectures=["BertLMHeadModel"], is_decoder=True)
    return out


def gpt_from_hf_bert_lm_head(hf_config: Any, hf_state: dict[str, Tensor],
                             special_ids: dict[str, Any] | None = None) -> MaskplayModel:
    """The maskplay GPT of a BertLMHeadModel (config, state dict), weights loaded strictly; `special_ids` as for
    from_hf."""
    from .families import GPT

    config = config_from_hf_bert_lm_head(hf_config)
    if special_ids:
        config = dataclasses.replace(config, **special_ids)
    model = GPT(config)
    want = maskplay_to_hf_bert_lm_head(model.state_dict())
    missing = sorted(set(want) - set(hf_state) - _OPTIONAL_HF_KEYS)
    if missing:
        raise ValueError(f"the BertLMHeadModel checkpoint is missing weights: {missing}")
    model.load_strict(hf_bert_lm_head_to_maskplay(hf_state), source="the converted BertLMHeadModel weights")
    return model.eval()


def gpt_to_hf_bert_lm_head(model: MaskplayModel) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(config.json dict, state dict) of the BertLMHeadModel a maskplay GPT becomes."""
    config = hf_bert_lm_head_config_dict(model.config)
    return config, maskplay_to_hf_bert_lm_head(model.state_dict())


# ---- sequence classification: a maskplay fine-tuned model (maskplay.finetune) <-> HuggingFace ---------------
# BertForSequenceClassification = BertModel + pooler (Dense + tanh on [CLS]) + Dropout + Linear: a FineTuned bert
# (or unilm: the same weights, read bidirectionally) with head "bert" and pooling "first".
# ElectraForSequenceClassification = ElectraModel + ElectraClassificationHead (Dropout, Dense, GELU, Dropout,
# Linear on the first token): a FineTuned electra with head "electra" and pooling "first".
# Other heads and poolings (the default "linear" head, mean / last pooling) have no HuggingFace twin.

_BERT_SEQ_TOP = {**{k: v for k, v in _TOP.items() if k.startswith("bert.")},
                 "bert.pooler.dense": "classifier.dense", "classifier": "classifier.out"}
_ELECTRA_SEQ_TOP = {**_ELECTRA_EMBEDDINGS, "classifier.dense": "classifier.dense",
                    "classifier.out_proj": "classifier.out"}
SEQUENCE_ARCHITECTURES = ("BertForSequenceClassification", "ElectraForSequenceClassification")


def _finetuned_state(model: Any) -> dict[str, Tensor]:
    """A FineTuned model's weights with the backbone's at the top level (as a MaskplayModel's) + classifier.*."""
    return {(k[len("backbone."):] if k.startswith("backbone.") else k): v for k, v in model.state_dict().items()}


def sequence_classification_architecture(model: Any) -> str:
    """The HuggingFace twin of a FineTuned model, or a ValueError saying why it has none."""
    config, head = model.config, model.head_config
    family = config.family
    if family in ("bert", "unilm"):
        want, architecture = "bert", "BertForSequenceClassification"
        if config.embedding_size is not None:
            raise ValueError("BertForSequenceClassification has no embedding_size: this bert has one")
    elif family == "electra":
        want, architecture = "electra", "ElectraForSequenceClassification"
    else:
        raise ValueError(f"a fine-tuned {family} model has no HuggingFace sequence-classification twin (bert, unilm and "
                         "electra do)")
    if head.head != want or head.pooling != "first":
        raise ValueError(f"{architecture} reads the first token through its own head: fine-tune with --head {want} "
                         f"--pooling first to export (this model: head {head.head!r}, pooling {head.pooling!r})")
    return architecture


def finetuned_to_hf_sequence_classification(model: Any) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(config.json dict, state dict) of the BertForSequenceClassification / ElectraForSequenceClassification a
    FineTuned model (maskplay.finetune) becomes; its logits equal HuggingFace's."""
    architecture = sequence_classification_architecture(model)
    config, head = model.config, model.head_config
    state = _finetuned_state(model)
    if architecture == "BertForSequenceClassification":
        out = _to_hf(state, _BERT_SEQ_TOP, _BERT_LAYERS)
        data = hf_config_dict(dataclasses.replace(config, family="bert", unilm=type(config.unilm)()))
    else:
        out = _to_hf(state, _ELECTRA_SEQ_TOP, _ELECTRA_LAYERS)
        data = hf_config_dict(config)
    labels = head.labels if head.objective == "classify" else ["score"]
    data.update(architectures=[architecture], num_labels=len(labels), classifier_dropout=head.dropout,
                id2label={str(i): name for i, name in enumerate(labels)},
                label2id={name: i for i, name in enumerate(labels)},
                problem_type="single_label_classification" if head.objective == "classify" else "regression")
    return data, out


def finetuned_from_hf_sequence_classification(architecture: str, hf_config: Any, hf_state: dict[str, Tensor],
                                              special_ids: dict[str, Any] | None = None) -> Any:
    """The FineTuned model (maskplay.finetune) of a HuggingFace BertForSequenceClassification /
    ElectraForSequenceClassification (config, state dict), weights loaded strictly. A regression model
    (problem_type "regression", or num_labels 1) gets the regress objective; a classifier its id2label names."""
    from .families import BertMLM, Electra
    from .finetune import FineTuned, HeadConfig

    if architecture not in SEQUENCE_ARCHITECTURES:
        raise ValueError(f"HuggingFace architecture {architecture!r} is not a supported sequence classifier; "
                         f"supported: {list(SEQUENCE_ARCHITECTURES)}")
    num_labels = int(getattr(hf_config, "num_labels", None) or len(getattr(hf_config, "id2label", {}) or {}) or 2)
    regress = getattr(hf_config, "problem_type", None) == "regression" or num_labels == 1
    if getattr(hf_config, "problem_type", None) == "multi_label_classification":
        raise ValueError("multi_label_classification has no maskplay counterpart (one label per input)")
    id2label = getattr(hf_config, "id2label", None) or {}
    labels = [] if regress else [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(num_labels)]
    dropout = getattr(hf_config, "classifier_dropout", None)
    dropout = hf_config.hidden_dropout_prob if dropout is None else dropout
    if architecture == "BertForSequenceClassification":
        config, top, layers, kind = config_from_hf_bert(hf_config), _BERT_SEQ_TOP, _BERT_LAYERS, "bert"
    else:
        config = config_from_hf_electra(hf_config)
        top, layers, kind = _ELECTRA_SEQ_TOP, _ELECTRA_LAYERS, "electra"
    if special_ids:
        config = dataclasses.replace(config, **special_ids)
    head = HeadConfig(objective="regress" if regress else "classify", labels=labels, pooling="first", head=kind,
                      dropout=dropout)
    model = FineTuned((Electra if kind == "electra" else BertMLM)(config), head)
    converted = _from_hf(hf_state, top, layers, skip=(*_HF_BUFFERS, *_ELECTRA_BUFFERS))
    want = _to_hf(_finetuned_state(model), top, layers)
    missing = sorted(set(want) - set(hf_state))
    if missing:
        raise ValueError(f"the {architecture} checkpoint is missing weights: {missing}")
    model.load_state_dict({f"backbone.{k}" if not k.startswith("classifier.") else k: v
                           for k, v in converted.items()}, strict=True)
    return model.eval()
