"""What the converters of HuggingFace's causal LMs share (gpt2.py, gpt_neox.py, llama.py, qwen2.py, opt.py): each maps
its architecture onto maskplay's gpt family with the causal-LM switches (docs/guides/switches.md), one way only: from_hf.
Their to_hf refuses in one line (a gpt with these switches has no HuggingFace BertLMHeadModel twin).

A converter states its config (config_from_hf) and how its weights are named (rename: a function from one
HuggingFace key to the maskplay key(s) it fills); CausalConverter.from_hf checks that every HuggingFace weight
lands somewhere and every maskplay weight is filled, naming the first that does not."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ...config import ModelConfig
from .common import HFCheckpoint, HFConverter, HFExport

if TYPE_CHECKING:
    from ..base import MaskplayModel

# HuggingFace's hidden_act / activation_function -> (ffn, gelu_tanh)
ACTIVATIONS = {"gelu": ("gelu", False), "gelu_new": ("gelu", True), "gelu_pytorch_tanh": ("gelu", True),
               "gelu_fast": ("gelu", True), "relu": ("relu", False)}

# (HuggingFace key, maskplay key or None to drop it); a rename yields the pairs one HuggingFace key gives
Renamed = Iterator[tuple[str, Tensor]]


def activation(name: Any, architecture: str) -> tuple[str, bool]:
    """(ffn, gelu_tanh) of an ungated layer's activation; a one-line error for one maskplay has not."""
    if name not in ACTIVATIONS:
        raise ValueError(f"{architecture}: activation {name!r} is not supported; supported: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def rope(hf_config: Any, architecture: str) -> tuple[float, float]:
    """(rotary_base, rotary_fraction) from transformers 5's rope_parameters or the older keys (rope_theta,
    rotary_emb_base, rotary_pct, partial_rotary_factor); scaled RoPE (linear, dynamic, YaRN, llama3) is refused."""
    params = getattr(hf_config, "rope_parameters", None) or {}
    scaling = getattr(hf_config, "rope_scaling", None) or {}
    if not isinstance(params, dict) or not isinstance(scaling, dict):
        raise ValueError(f"{architecture}: rope_parameters / rope_scaling must be objects")
    kinds = [k for k in (params.get("rope_type"), scaling.get("rope_type"), scaling.get("type"))
             if k not in (None, "default")]
    if kinds:
        raise ValueError(f"{architecture}: RoPE scaling {kinds[0]!r} is not supported (only the default RoPE)")

    def first(*values: Any) -> Any:
        return next((v for v in values if v is not None), None)

    base = first(params.get("rope_theta"), getattr(hf_config, "rope_theta", None),
                 getattr(hf_config, "rotary_emb_base", None), 10000.0)
    fraction = first(params.get("partial_rotary_factor"), getattr(hf_config, "partial_rotary_factor", None),
                     getattr(hf_config, "rotary_pct", None), 1.0)
    return float(base), float(fraction)


def special_fields(hf_config: Any) -> dict[str, Any]:
    """maskplay's special-token fields from a causal LM's bos / eos / pad ids: [SOS] = bos (else eos), [EOS] = eos
    (else bos), [PAD] = pad (else eos); the [UNK] and [MASK] a causal LM never reads are the end token too."""
    def one(value: Any) -> int | None:
        return value[0] if isinstance(value, list) and value else value if isinstance(value, int) else None

    bos, eos, pad = (one(getattr(hf_config, name, None)) for name in ("bos_token_id", "eos_token_id", "pad_token_id"))
    vocab = hf_config.vocab_size
    sos = next((i for i in (bos, eos) if i is not None and 0 <= i < vocab), 0)
    end = next((i for i in (eos, bos) if i is not None and 0 <= i < vocab), sos)
    pad = pad if pad is not None and 0 <= pad < vocab else end
    return dict(sos_token_id=sos, eos_token_id=end, pad_token_id=pad, unk_token_id=end, mask_token_id=end,
                sep_token_id=None, special_token_ids=sorted({sos, end, pad}))


def causal_config(hf_config: Any, **fields: Any) -> ModelConfig:
    """The gpt ModelConfig: `fields` plus the special tokens and what every converted causal LM has (no segments, no
    norm after the embeddings)."""
    return ModelConfig(family="gpt", type_vocab_size=0, embedding_norm=False, **special_fields(hf_config), **fields)


def strip_prefix(state: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """Keys under `prefix` without it (a checkpoint saved from the bare model, GPT2Model or OPTModel, lacks it)."""
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state.items()}


def layer_key(key: str, layers: str) -> tuple[int, str] | None:
    """(index, rest) of `layers.{index}.{rest}`, or None."""
    if not key.startswith(layers + "."):
        return None
    index, _, rest = key[len(layers) + 1:].partition(".")
    return (int(index), rest) if index.isdigit() else None


def top_key(key: str, value: Tensor, top: dict[str, str | None]) -> Renamed | None:
    """A key outside the layers (embeddings, final norm, head) renamed by the converter's `top` table; one mapped to
    None is a buffer the config rebuilds (dropped); None for a key the table does not know."""
    if key not in top:
        return None
    name = top[key]
    return iter([] if name is None else [(name, value)])


def map_keys(state: dict[str, Tensor], rename: Callable[[str, Tensor], Renamed | None]) -> dict[str, Tensor]:
    """Every HuggingFace weight through `rename`, which yields (maskplay key, tensor) pairs (none: a buffer dropped on
    purpose) or returns None for a key it does not know: an error naming it."""
    out: dict[str, Tensor] = {}
    unknown = []
    for key, value in state.items():
        pairs = rename(key, value)
        if pairs is None:
            unknown.append(key)
            continue
        out.update(pairs)
    if unknown:
        raise ValueError(f"HuggingFace weights with no maskplay counterpart: {unknown}")
    return out


def without_tied_head(state: dict[str, Tensor], head: str, word: str, tied: bool) -> dict[str, Tensor]:
    """`state` without the head's weight when the head is tied (the word embeddings serve as it). That weight, when
    the checkpoint writes it out, must be the word embeddings."""
    value = state.get(head)
    if tied and value is not None and (value.shape != state[word].shape or not torch.equal(value, state[word])):
        raise ValueError(f"{head} differs from the word embeddings ({word}) though tie_word_embeddings is true")
    return {k: v for k, v in state.items() if k != head} if tied else state


class CausalConverter(HFConverter):
    """A HuggingFace causal LM -> maskplay gpt. A subclass sets architectures, model_type, hf_defaults and writes
    config_from_hf and convert_state (HuggingFace state dict -> maskplay state dict)."""

    family = "gpt"
    twin = False  # not the gpt family's to_hf counterpart (BertLMHeadModel is)
    decoder = True
    model_type = ""

    def recognise(self, data: dict[str, Any], state: dict[str, Tensor]) -> str | None:
        return self.architectures[0] if data.get("model_type") == self.model_type else None

    def describe(self, architecture: str, model: MaskplayModel, paired: bool = False) -> str:
        return f"gpt (a {architecture})"

    def convert_state(self, hf_config: Any, state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
        raise NotImplementedError

    def from_hf(self, architecture: str, checkpoint: HFCheckpoint, generator: HFCheckpoint | None = None,
                special_ids: dict[str, Any] | None = None) -> MaskplayModel:
        from ..gpt import GPT

        hf_config, state = checkpoint
        config = self.config_from_hf(hf_config)
        if special_ids:
            config = dataclasses.replace(config, **special_ids)
        model = GPT(config)
        converted = self.convert_state(hf_config, state, config)
        missing = sorted(set(model.state_dict()) - set(converted))
        if missing:
            raise ValueError(f"the {architecture} checkpoint is missing weights (maskplay names): {missing}")
        model.load_strict(converted, source=f"the converted {architecture} weights")
        return model.eval()

    def to_hf(self, model: MaskplayModel) -> list[HFExport]:
        raise ValueError(f"{self.architectures[0]} is read only: maskplay does not write it back")

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        raise ValueError(f"{self.architectures[0]} is read only: maskplay does not write it back")
