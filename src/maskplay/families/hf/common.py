"""What the HuggingFace converters share: the BERT-layout key renaming (from_hf_keys / to_hf_keys), the config
fields a BERT-like HuggingFace config sets, the defaults transformers assumes, and the converter interface
(families/hf/__init__.py registers one converter per family)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from ...config import ModelConfig
    from ..base import MaskplayModel

HFCheckpoint = tuple[Any, dict[str, Tensor]]  # (a HuggingFace config: attributes as in config.json, state dict)
HFExport = tuple[dict[str, Any], dict[str, Tensor]]  # (config.json dict, state dict)

# What transformers assumes for a key config.json leaves out (BertConfig's and ElectraConfig's defaults); each
# converter's hf_defaults go on top.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 30522, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
    "pad_token_id": 0, "position_embedding_type": "absolute", "tie_word_embeddings": True, "is_decoder": False,
    "add_cross_attention": False,
}
BERT_DEFAULTS: dict[str, Any] = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                                 "intermediate_size": 3072}
ELECTRA_DEFAULTS: dict[str, Any] = {"embedding_size": 128, "hidden_size": 256, "num_hidden_layers": 12,
                                    "num_attention_heads": 4, "intermediate_size": 1024}

# The types of the config.json keys the converters read: a value of another type ("hidden_size": "256") is an error
# naming the file and key (check_hf_types), not a TypeError inside a converter. None is accepted (transformers
# writes null for a key it leaves to a default); the sizes must also be positive.
HF_POSITIVE_INTS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                    "max_position_embeddings", "embedding_size", "num_labels", "n_layer", "n_head", "n_embd",
                    "n_positions", "n_ctx", "n_inner", "d_model", "d_inner", "d_head")
HF_INTS = ("type_vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "mem_len", "sep_token_id")
HF_FLOATS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps",
             "layer_norm_epsilon", "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout", "classifier_dropout")
HF_STRS = ("hidden_act", "position_embedding_type", "problem_type", "activation_function", "model_type")
HF_BOOLS = ("tie_word_embeddings", "is_decoder", "add_cross_attention")


def check_hf_types(data: dict[str, Any], source: str) -> None:
    """Every key of HF_* above that `data` holds has its type; else a ValueError naming `source` and the key."""
    import math

    def bad(key: str, what: str) -> ValueError:
        return ValueError(f"{source}: \"{key}\": {data[key]!r} is not {what}")

    for key, value in data.items():
        if value is None:
            continue
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if key in HF_POSITIVE_INTS and not (is_int and value > 0):
            raise bad(key, "a positive integer")
        ints = isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        if key in HF_INTS and not is_int and not (key == "eos_token_id" and ints):  # LLaMA 3: a list of end tokens
            raise bad(key, "an integer")
        if key in HF_FLOATS and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                     and math.isfinite(value)):
            raise bad(key, "a finite number")
        if key in HF_STRS and not isinstance(value, str):
            raise bad(key, "a string")
        if key in HF_BOOLS and not isinstance(value, bool):
            raise bad(key, "true or false")
    if data.get("id2label") is not None and not isinstance(data["id2label"], dict):
        raise bad("id2label", "an object of label names")


# Tied copies HuggingFace may leave out of a checkpoint (transformers 5 saves none of them): BERT's decoder weight
# and bias, ELECTRA's generator decoder.
OPTIONAL_HF_KEYS = frozenset({"cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
                              "generator_lm_head.weight"})

# HuggingFace buffers that are not weights (present in some transformers versions' state dicts).
HF_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")
ELECTRA_BUFFERS = ("electra.embeddings.position_ids", "electra.embeddings.token_type_ids")

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


class HFConverter:
    """One maskplay family <-> its HuggingFace twin(s). A subclass states the family it converts (`family`), the
    HuggingFace architectures it reads (`architectures`), what transformers assumes for keys their config.json
    leaves out (`hf_defaults`), and converts models and configs both ways."""

    family: str = ""
    architectures: tuple[str, ...] = ()
    hf_defaults: dict[str, Any] = {}
    takes_generator: tuple[str, ...] = ()  # the architectures from_hf pairs with a second (generator) checkpoint
    decoder = False  # whether config.json may say is_decoder = true (the model attends causally)
    twin = True  # the family's HuggingFace counterpart, what to_hf writes (False: read only, another architecture)

    def recognise(self, data: dict[str, Any], state: dict[str, Tensor]) -> str | None:
        """The architecture of a config.json without `architectures` (its model_type, is_decoder, the head's
        weights), or None when it is none of this converter's."""
        return None

    def describe(self, architecture: str, model: MaskplayModel, paired: bool = False) -> str:
        """What `architecture` converted to (`model`; `paired`: with its generator), for the user."""
        raise NotImplementedError

    def from_hf(self, architecture: str, checkpoint: HFCheckpoint, generator: HFCheckpoint | None = None,
                special_ids: dict[str, Any] | None = None) -> MaskplayModel:
        raise NotImplementedError

    def to_hf(self, model: MaskplayModel) -> list[HFExport]:
        raise NotImplementedError

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        raise NotImplementedError

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        raise NotImplementedError


# ---- renaming ---------------------------------------------------------------------------------------------


def from_hf_keys(hf_state: dict[str, Tensor], top: dict[str, str], layers: str, skip: tuple[str, ...],
                 layer_map: dict[str, str] | None = None) -> dict[str, Tensor]:
    """Rename by `top` (module -> module) and by `layer_map` (default _LAYER, BERT's) under `layers`; the keys in
    `skip` (buffers, tied copies the caller checks) are dropped, anything else is an error naming the key."""
    layer_map = _LAYER if layer_map is None else layer_map
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
            if index.isdigit() and rest in layer_map:
                out[f"encoder.layers.{index}.{layer_map[rest]}.{leaf}"] = value
                continue
        unknown.append(key)
    if unknown:
        raise ValueError(f"HuggingFace weights with no maskplay counterpart: {unknown}")
    return out


def to_hf_keys(state: dict[str, Tensor], top: dict[str, str], layers: str,
               layer_map: dict[str, str] | None = None, segment_table: bool = True) -> dict[str, Tensor]:
    """The inverse of from_hf_keys; a maskplay key with no HuggingFace name is an error naming it.
    `segment_table`: write the one-row token-type table HuggingFace BERT always has (_with_segment_table)."""
    inverse = {v: k for k, v in top.items()}
    layer = {v: k for k, v in (_LAYER if layer_map is None else layer_map).items()}
    out: dict[str, Tensor] = {}
    unknown = []
    for key, value in (_with_segment_table(state) if segment_table else state).items():
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
    gets one row of zeros, which adds nothing (the config dicts say type_vocab_size = 1 to match)."""
    word = state.get("embeddings.word.weight")
    if word is None or "embeddings.segment.weight" in state:
        return state
    return {**state, "embeddings.segment.weight": word.new_zeros(1, word.shape[1])}


def check_tied(hf_state: dict[str, Tensor], decoder: str, word: str) -> None:
    value = hf_state.get(decoder)
    if value is not None and (value.shape != hf_state[word].shape or not torch.equal(value, hf_state[word])):
        raise ValueError(f"{decoder} differs from the word embeddings ({word}): maskplay ties them")


def check_hf_sizes(config: ModelConfig, state: dict[str, Tensor]) -> None:
    """The sizes a HuggingFace config.json gives (`config`, converted) against its weights' shapes, before a
    model of them is built: a config.json of n_embd 1e9 is one line, not an allocation of terabytes."""
    from ...runtime.model_dir import check_buffers, check_sizes_fit
    from ..base import _NoRandomInitOnMeta, family_class

    source = "the HuggingFace config.json"
    check_sizes_fit(config, {k: tuple(v.shape) for k, v in state.items()}, source, "its weights")
    # then the model those sizes build, on the meta device (no memory): every maskplay weight is filled from one
    # HuggingFace weight (a headless encoder's zero head aside), so a model far larger than the weights, such as
    # relative-position tables of 10^12 buckets that no width shows, is refused before it is built for real. The
    # random initialisers are skipped on the meta device (nothing to fill): they were most of this check's time
    try:
        with torch.device("meta"), _NoRandomInitOnMeta():
            skeleton = family_class(config.family)(config)
    except (RuntimeError, TypeError, ValueError, OverflowError) as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{source}: its sizes build no model ({detail})"[:300]) from None
    built = sum(p.numel() for p in skeleton.parameters())
    held = sum(v.numel() for v in state.values())
    if built > 2 * held + (1 << 20):
        raise ValueError(f"{source}: its sizes build a model of {built:,} parameters from weights of {held:,} "
                         "(a size in config.json does not match the weights)")
    check_buffers({k: (tuple(b.shape), b.element_size()) for k, b in skeleton.named_buffers()},
                  sum(v.numel() * v.element_size() for v in state.values()), source)


# ---- configs ----------------------------------------------------------------------------------------------


def check_supported(hf_config: Any, what: str) -> None:
    act = getattr(hf_config, "hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(f"{what}: only hidden_act='gelu' is supported, got {act!r}")
    position = getattr(hf_config, "position_embedding_type", None) or "absolute"
    if position != "absolute":
        raise ValueError(f"{what}: only absolute position embeddings are supported, got {position!r}")


def backbone_fields(hf_config: Any) -> dict[str, Any]:
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


def bert_like_config_dict(config: ModelConfig, architecture: str) -> dict[str, Any]:
    """config.json of a BertForMaskedLM / ElectraForMaskedLM / ElectraForPreTraining (`architecture`) with
    `config`'s sizes; the caller has checked that `config` has that HuggingFace counterpart."""
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
