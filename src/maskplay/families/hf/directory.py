"""HuggingFace model directories (config.json + model.safetensors, sharded safetensors, or pytorch_model.bin read
with torch.load(weights_only=True)) read as maskplay models in memory: MaskplayModel.from_pretrained calls
load_hf_model for a directory whose config.json is HuggingFace's, so every command and API that opens a model
directory takes one. `maskplay convert --from-hf` reads through here too.

Headless encoders (BertModel, RobertaModel, ... as sentence-transformers ships them) convert with their masked
class's converter (`encoders` on a converter); their LM head is zero and the model's `no_lm_head` says why it
cannot score. sentence-transformers' modules.json and its Pooling module's config.json give the pooling."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ...runtime.files import file_inside, model_file
from ...runtime.json_files import read_json_dict, read_json_file
from ...runtime.model_dir import is_hf_directory
from .common import HF_DEFAULTS, HFConverter, check_hf_sizes
from .registry import architectures, converter_for_architecture, from_hf, hf_architecture
from .sentence_modules import sentence_normalize, sentence_pooling
from .validate import check_hf_config

if TYPE_CHECKING:
    from ..base import MaskplayModel

__all__ = ["is_hf_directory", "load_hf_model", "read_hf_dir", "read_weights", "special_ids"]

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
PICKLED = "pytorch_model.bin"
TOKENIZER = "tokenizer.json"


def read_config(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise FileNotFoundError(f"HuggingFace model directory {directory} not found")
    path = model_file(directory, CONFIG)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: a HuggingFace model directory needs config.json")
    data = read_json_dict(path)  # size-capped: a config.json that never ends is one line
    check_hf_config(data, str(path))  # "hidden_size": "256" is named here, not a TypeError in a converter
    return data


def read_hf_dir(directory: str | Path) -> tuple[str, SimpleNamespace, dict[str, Tensor]]:
    """(architecture, config, weights) of a HuggingFace directory holding a model from_hf converts."""
    directory = Path(directory)
    data = read_config(directory)
    named = (data.get("architectures") or [None])[0]
    if named in encoders():
        raise ValueError(f"{directory} holds a {named}, an encoder without LM head: `maskplay convert` writes "
                         "language models; maskplay embed, eval sts and finetune read the directory as it is")
    state = read_weights(directory)
    architecture = hf_architecture(data, state, directory / CONFIG)
    return architecture, _namespace(converter_for_architecture(architecture), data), state


def _namespace(converter: HFConverter, data: dict[str, Any]) -> SimpleNamespace:
    """config.json's fields as attributes, with what transformers assumes for the keys it leaves out (the types
    were checked by read_config)."""
    return SimpleNamespace(**{**HF_DEFAULTS, **converter.hf_defaults, **data})


def read_weights(directory: Path) -> dict[str, Tensor]:
    """model.safetensors, its shards, or pytorch_model.bin (torch.load with weights_only=True: tensors only,
    nothing else unpickled); a damaged file is one ValueError naming it. Each is one of the directory's files
    (model_file: a symbolic link out of it is refused before anything looks at its target)."""
    from ...runtime.model_dir import read_weights as read_safetensors

    if model_file(directory, WEIGHTS).is_file():
        return read_safetensors(directory / WEIGHTS)
    if model_file(directory, WEIGHTS_INDEX).is_file():
        return _read_shards(directory, read_safetensors)
    if model_file(directory, PICKLED).is_file():
        return _read_pickled(directory / PICKLED)
    if model_file(directory, f"{PICKLED}.index.json").is_file():
        raise FileNotFoundError(f"{directory} has sharded {PICKLED} files: re-save the model with "
                                "model.save_pretrained(dir, safe_serialization=True)")
    raise FileNotFoundError(f"{directory / WEIGHTS} not found")


def _read_shards(directory: Path, read: Any) -> dict[str, Tensor]:
    """The shards model.safetensors.index.json names: each a file inside `directory` (its name checked before
    anything of that name is looked at: no absolute path, no `..`, no symbolic link leading out)."""
    index_path = model_file(directory, WEIGHTS_INDEX)
    index = read_json_file(index_path)  # size-capped
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{index_path} is damaged: no weight_map of file names")
    state: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        path = file_inside(directory, shard, index_path)
        if not path.is_file():
            raise FileNotFoundError(f"{index_path} names a shard {shard!r} that is not in {directory}")
        state.update(read(path))
    return state


def _read_pickled(path: Path) -> dict[str, Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds (UnpicklingError, RuntimeError, EOFError, ...)
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"{path} is damaged or holds more than tensors (read with weights_only=True: {detail}); "
                         "re-save the model with model.save_pretrained(dir, safe_serialization=True)") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()):
        raise ValueError(f"{path} is not a state dict of tensors; re-save the model with "
                         "model.save_pretrained(dir, safe_serialization=True)")
    return state


def special_ids(hf_dir: Path, vocab_size: int, padded: bool = False) -> tuple[dict[str, Any], str | None]:
    """The special-token ids of the HuggingFace directory's own tokenizer (tokenizer.json, else vocab.txt), so that
    the model's [MASK], [PAD], ... are the tokenizer's; without one, the converter's layout stays. `padded`: a
    tokenizer smaller than the embedding table is fine (the model read in memory, MaskplayModel.vocabulary_padded)."""
    from ...data.tokenizer import check_covers, load_tokenizer

    if not any(model_file(hf_dir, name).is_file() for name in (TOKENIZER, "vocab.txt")):
        return {}, None
    try:
        tokenizer = load_tokenizer(hf_dir)
    except ValueError as err:
        return {}, f"note: special-token ids left in the converter's layout ({err})"
    check_covers(tokenizer, vocab_size, str(hf_dir))  # another model's tokenizer would give the model its ids
    ids = tokenizer.model_config_ids()
    size = ids.pop("vocab_size")
    if any(not 0 <= ids[k] < vocab_size for k in ids if k != "special_token_ids"):
        return {}, (f"note: the tokenizer's special tokens fall outside the model's vocabulary of {vocab_size}; "
                    "special-token ids left in the converter's layout")
    notes = []
    if size > vocab_size or (size < vocab_size and not padded):
        notes.append(f"note: the tokenizer has {size} tokens and the model {vocab_size} embeddings; maskplay score and "
                     "embed need the two to match")
    if "sos" in tokenizer.special.fallback:  # a causal LM scores each sentence after its start token
        end = tokenizer.backend.id_to_token(tokenizer.special.eos)
        notes.append(f"note: the tokenizer names no start (bos) token, in tokenizer.json, tokenizer_config.json or "
                     f"config.json; sentences start with its end token {end} instead")
    return ids, "; ".join(notes) or None


# ---- reading a directory as a model -------------------------------------------------------------------------


def encoders() -> dict[str, HFConverter]:
    """Headless encoder architecture -> the converter of its masked class (the converters' `encoders`)."""
    from .registry import _BY_ARCHITECTURE

    return {name: c for c in dict.fromkeys(_BY_ARCHITECTURE.values()) for name in getattr(c, "encoders", {})}


def readable() -> list[str]:
    """Every architecture a HuggingFace directory may hold: the registry's, then the headless encoders."""
    return [*architectures(), *encoders()]


def load_hf_model(directory: str | Path) -> MaskplayModel:
    """The maskplay model of a HuggingFace directory, converted in memory; one line on stderr says so."""
    directory = Path(directory)
    data = read_config(directory)
    named = (data.get("architectures") or [None])[0]
    if named is not None and named not in readable():
        raise ValueError(f"{directory / CONFIG}: architecture {named!r} is not one maskplay reads; it reads "
                         f"{', '.join(readable())}")
    try:
        if named in encoders():
            model, what = _encoder_model(directory, named, data)
            note = None
        else:
            architecture, config, state = read_hf_dir(directory)
            ids, note = special_ids(directory, config.vocab_size, padded=True)
            model = from_hf(architecture, (config, state), special_ids=ids)
            described = converter_for_architecture(architecture).describe(architecture, model)
            what = f"a HuggingFace {architecture}, converted in memory to {described}"
    except ValueError as err:  # a converter's message names the field, not always the directory: add it
        if str(directory) in str(err):
            raise
        raise ValueError(f"{directory}: {err}") from None
    model.vocabulary_padded = True
    print(f"maskplay: {directory} is {what}{'; ' + note if note else ''}", file=sys.stderr)
    return model


def _encoder_model(directory: Path, architecture: str, data: dict[str, Any]) -> tuple[MaskplayModel, str]:
    """A headless encoder read with its masked class's converter, the LM head zero and marked missing."""
    from ..base import family_class

    converter = encoders()[architecture]
    prefix = converter.encoders[architecture]  # type: ignore[attr-defined]
    masked = converter.architectures[0]
    config = _namespace(converter_for_architecture(masked), data)
    weights = read_weights(directory)
    pooler = [k for k in weights if k.removeprefix(prefix).startswith("pooler.")]  # the [CLS] pooler: left out, said
    state = {(k if k.startswith(prefix) else prefix + k): v for k, v in weights.items() if k not in pooler}
    ids, _ = special_ids(directory, config.vocab_size, padded=True)
    model_config = converter.config_from_hf(config)
    check_hf_sizes(model_config, state)  # before anything of those sizes is built
    if ids:
        import dataclasses

        model_config = dataclasses.replace(model_config, **ids)
    model = family_class(model_config.family)(model_config)
    converted = converter.state_from_hf(state, config)  # type: ignore[attr-defined]
    head = {k: torch.zeros_like(v) for k, v in model.state_dict().items() if k.startswith("head.")}
    model.load_strict({**converted, **head}, source=f"the converted {architecture} weights")
    model.vocabulary_padded = True
    model.no_lm_head = f"{directory} holds a {architecture}, an encoder without LM head"
    pooling, why = sentence_pooling(directory)
    model.hf_pooling, model.hf_normalize = pooling, sentence_normalize(directory)
    normalized = ", normalized" if model.hf_normalize else ""
    what = (f"a HuggingFace {architecture} (no LM head: it embeds and fine-tunes, it does not score), converted in "
            f"memory to {model_config.family}; pooling {pooling or 'mean'}{normalized}{' (' + why + ')' if why else ''}"
            f"{'; its [CLS] pooler left out (no sentence-transformers pooling reads it)' if pooler else ''}")
    return model.eval(), what
