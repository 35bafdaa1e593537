"""A HuggingFace config.json checked field by field before any converter reads it (families/hf/directory.py and
hf_config call check_hf_config): each problem is one ValueError naming the file and the field, never a TypeError
or KeyError inside a converter, a tensor of negative size, or a setting silently ignored.

- `architectures`: absent, null or [] (the converters tell the class by model_type), else a list of one class
  name, whose model_type (when config.json gives one) must be that class's;
- the value types common.check_hf_types knows, and more fields of the causal LMs' configs (key/value heads,
  head_dim, RMSNorm's epsilon, RoPE's base and fraction); sizes positive, epsilons positive, dropouts in [0, 1],
  fractions in (0, 1];
- widths that must divide: hidden size by heads, heads by key/value heads;
- RoPE: rope_scaling / rope_parameters null or an object of numbers, its type the default (no converter here
  implements scaled RoPE: linear, dynamic, YaRN, llama3, ... are refused, not ignored)."""

from __future__ import annotations

import math
from typing import Any

from .common import check_hf_types

# transformers' model_type of each architecture maskplay reads, by the class name's prefix (RoBERTa's classes are
# also saved under XLM-R's and CamemBERT's types, whose weights they share)
MODEL_TYPES: dict[str, tuple[str, ...]] = {
    "Bert": ("bert",), "Electra": ("electra",), "XLNet": ("xlnet",), "GPT2": ("gpt2",), "GPTNeoX": ("gpt_neox",),
    "Llama": ("llama",), "Qwen2": ("qwen2",), "OPT": ("opt",), "Roberta": ("roberta", "xlm-roberta", "camembert"),
    "XLMRoberta": ("xlm-roberta", "roberta"), "DistilBert": ("distilbert",), "Albert": ("albert",),
    "DebertaV2": ("deberta-v2",),
}
POSITIVE_INTS = ("num_key_value_heads", "head_dim", "ffn_dim", "word_embed_proj_dim", "dim", "hidden_dim", "n_heads",
                 "n_layers", "num_hidden_groups", "inner_group_num")
NON_NEGATIVE_INTS = ("type_vocab_size",)  # DeBERTa-v3 has none (0)
POSITIVE_NUMBERS = ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps", "rope_theta", "rotary_emb_base")
NON_NEGATIVE_NUMBERS = ("initializer_range", "init_std")  # the std of the (unused) initialisation the model is built with
FRACTIONS = ("partial_rotary_factor", "rotary_pct")  # the share of each head RoPE turns: (0, 1]
DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout",
            "classifier_dropout", "attention_dropout", "activation_dropout", "qa_dropout", "seq_classif_dropout",
            "hidden_dropout")
BOOLS = ("use_sliding_window", "attention_bias", "mlp_bias", "use_parallel_residual", "do_layer_norm_before",
         "enable_bias", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
         "relative_attention", "position_biased_input", "share_att_key", "legacy", "sinusoidal_pos_embds",
         "bi_data", "same_length", "untie_r", "parallel_residual", "layer_norm_elementwise_affine",
         "_remove_final_layer_norm")
INTS = ("position_buckets", "max_relative_positions", "reuse_len", "clamp_len")  # -1: "none" in their configs
NON_NEGATIVE = ("conv_kernel_size",)
STRS = ("norm_rel_ebd", "attn_type", "activation", "tokenizer_class")
# sizes a model cannot be built without, for which transformers has no meaning of null (GPT-2's n_inner, LLaMA's
# head_dim or num_key_value_heads may be null: derived from the others)
NOT_NULL = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "n_layer", "n_head", "n_embd", "n_positions", "d_model", "type_vocab_size",
            "layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps", "initializer_range", "hidden_dropout_prob",
            "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "dropout",
            "hidden_dropout", "init_std", "ffn_dim", "dim", "hidden_dim", "n_heads", "n_layers", "d_inner",
            "max_relative_positions")
# the model types whose eos_token_id may list several end tokens (LLaMA 3's); a masked LM has one
CAUSAL_TYPES = ("gpt2", "gpt_neox", "llama", "qwen2", "opt")
# (width, heads): the width each family's config splits into heads
HEAD_SPLITS = (("hidden_size", "num_attention_heads"), ("n_embd", "n_head"), ("d_model", "n_head"), ("dim", "n_heads"))
ROPE_KEYS = ("rope_scaling", "rope_parameters")


def check_hf_config(data: dict[str, Any], source: str) -> None:
    """Every field of `data` (config.json's object, read from `source`) that a converter may read, checked; see
    the module's docstring. Raises ValueError naming `source` and the field."""
    check_hf_types(data, source)
    _check_architectures(data, source)

    def bad(key: str, what: str) -> ValueError:
        return ValueError(f"{source}: \"{key}\": {data[key]!r} is not {what}")

    for key, value in data.items():
        if value is None:
            if key in NOT_NULL:
                raise bad(key, "a size (null leaves the model without one)")
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if key in POSITIVE_INTS and not (is_int and value > 0):
            raise bad(key, "a positive integer")
        if key in NON_NEGATIVE_INTS and not (is_int and value >= 0):
            raise bad(key, "an integer of at least 0")
        if key in POSITIVE_NUMBERS and not (number and value > 0):
            raise bad(key, "a positive number")
        if key in NON_NEGATIVE_NUMBERS and not (number and value >= 0):
            raise bad(key, "a number of at least 0")
        if key in FRACTIONS and not (number and 0 < value <= 1):
            raise bad(key, "a number in (0, 1]")
        if key in DROPOUTS and not (number and 0 <= value <= 1):
            raise bad(key, "a probability in [0, 1]")
        if key in BOOLS and not isinstance(value, bool):
            raise bad(key, "true or false")
        if key in INTS and not is_int:
            raise bad(key, "an integer")
        if key in NON_NEGATIVE and not (is_int and value >= 0):
            raise bad(key, "an integer of at least 0")
        if key in STRS and not isinstance(value, str):
            raise bad(key, "a string")
        if key == "pos_att_type" and not (isinstance(value, str) or (
                isinstance(value, list) and all(isinstance(v, str) for v in value))):
            raise bad(key, "a string or a list of strings (\"p2c|c2p\", [\"p2c\", \"c2p\"])")
    if isinstance(data.get("eos_token_id"), list) and data.get("model_type") not in CAUSAL_TYPES:
        raise bad("eos_token_id", f"an integer (a list of end tokens is a causal LM's: {', '.join(CAUSAL_TYPES)})")
    _check_head_splits(data, source)
    for key in ROPE_KEYS:
        _check_rope(data.get(key), key, source)


def _check_architectures(data: dict[str, Any], source: str) -> None:
    named = data.get("architectures")
    if named is None or named == []:
        return
    if not isinstance(named, list) or not all(isinstance(a, str) and a for a in named):
        raise ValueError(f"{source}: \"architectures\": {named!r} is not a list of class names "
                         "(e.g. [\"BertForMaskedLM\"])")
    if len(named) > 1:
        raise ValueError(f"{source}: \"architectures\" names {len(named)} classes ({', '.join(named)}): maskplay "
                         "reads a directory holding one")
    model_type = data.get("model_type")
    prefix = max((p for p in MODEL_TYPES if named[0].startswith(p)), key=len, default=None)
    if model_type is not None and prefix is not None and model_type not in MODEL_TYPES[prefix]:
        raise ValueError(f"{source}: \"model_type\": {model_type!r} disagrees with \"architectures\": a {named[0]} "
                         f"is model_type {' or '.join(map(repr, MODEL_TYPES[prefix]))}")


def _check_head_splits(data: dict[str, Any], source: str) -> None:
    if data.get("head_dim") is None:  # an explicit head_dim: the converter compares it with the width
        for width, heads in HEAD_SPLITS:
            w, h = data.get(width), data.get(heads)
            if isinstance(w, int) and isinstance(h, int) and w % h:
                raise ValueError(f"{source}: \"{heads}\": {h} does not divide \"{width}\": {w}")
    heads, kv = data.get("num_attention_heads"), data.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv, int) and heads % kv:
        raise ValueError(f"{source}: \"num_key_value_heads\": {kv} does not divide \"num_attention_heads\": {heads}")


def _check_rope(value: Any, key: str, source: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValueError(f"{source}: \"{key}\": {value!r} is not an object (or null)")
    for name in ("rope_type", "type"):
        kind = value.get(name)
        if kind is not None and not isinstance(kind, str):
            raise ValueError(f"{source}: \"{key}\".\"{name}\": {kind!r} is not a string")
        if kind not in (None, "default"):
            raise ValueError(f"{source}: \"{key}\": RoPE scaling {kind!r} is not supported: maskplay's converters "
                             "compute the default RoPE only (no linear, dynamic, YaRN or llama3 scaling)")
    for name, what, ok in (("rope_theta", "a positive number", lambda v: v > 0),
                           ("partial_rotary_factor", "a number in (0, 1]", lambda v: 0 < v <= 1)):
        v = value.get(name)
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and ok(v)):
            raise ValueError(f"{source}: \"{key}\".\"{name}\": {v!r} is not {what}")
