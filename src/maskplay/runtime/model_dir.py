"""Model directories: config.json + model.safetensors (+ manifest.json, tokenizer.json), bundled model names,
hub ids, and the integrity checks run before any weight is read (loading never unpickles)."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from ..config import ModelConfig, from_dict
from .files import atomic_path, file_inside, model_file, replace_directory, sha256
from .json_files import read_json_dict, read_json_file

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
HEAD_CONFIG_NAME = "head_config.json"


def read_model_config(directory: str | Path, **overrides: Any) -> ModelConfig:
    """The ModelConfig in a model directory (a bundled name or hub id resolved first); a missing or damaged
    config.json is one error naming it."""
    resolved = resolve_model_dir(directory)
    config_path = model_file(resolved, CONFIG_NAME)  # a link out of the directory is refused before it is looked at
    if model_file(resolved, HEAD_CONFIG_NAME).is_file():  # `maskplay finetune` wrote it: no LM head to load
        raise ValueError(not_a_language_model(resolved))
    if not config_path.exists():
        raise FileNotFoundError(f"{config_path} not found: is {config_path.parent} a directory written by "
                                "save_pretrained?")
    if is_hf_directory(config_path.parent):  # MaskplayModel.from_pretrained reads these; a bare config cannot
        raise ValueError(f"{config_path} is a HuggingFace config, not a maskplay one: load the model with "
                         f"MaskplayModel.from_pretrained, or write it as a maskplay directory first (maskplay convert "
                         f"--from-hf {config_path.parent} --out DIR)")
    data = read_json_dict(config_path)  # size-capped: a config.json that never ends (/dev/zero) is one line
    return from_dict(ModelConfig, {**data, **overrides}, source=str(config_path))


def is_hf_directory(directory: str | Path) -> bool:
    """Whether `directory`'s config.json is a HuggingFace one (it names an architecture or model_type, and no
    maskplay family): MaskplayModel.from_pretrained then converts it in memory (families/hf/directory.py)."""
    try:
        data = read_json_file(model_file(directory, CONFIG_NAME))
    except (OSError, ValueError):  # read_model_config or the HuggingFace reader names the problem
        return False
    return isinstance(data, dict) and "family" not in data and ("architectures" in data or "model_type" in data)


ASSETS = Path(__file__).resolve().parents[1] / "assets"
# The project's models, usable by name anywhere a model directory is expected: in a clone all six are under
# src/maskplay/assets; an installed wheel bundles three and fetches the others on first use (runtime/models.py).
BUNDLED_MODELS = {"tta-mini-wiki": ASSETS / "tta-mini-wiki", "gpt-mini-wiki": ASSETS / "gpt-mini-wiki",
                  "unilm-titles-mini": ASSETS / "unilm-titles-mini", "gpt-two-hour": ASSETS / "gpt-two-hour",
                  "tta-two-hour": ASSETS / "tta-two-hour", "tta-two-hour-gutenberg": ASSETS / "tta-two-hour-gutenberg"}
# a Hub repository id: org/name, or a legacy name without an organisation (bert-base-uncased, gpt2)
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def model_not_found(name: str | Path, why: str = "") -> str:
    """The one-line error for a model that is nowhere: what was given, why not, and the forms accepted."""
    return (f"model directory {name} not found{f' ({why})' if why else ''}; a model is a local directory, a "
            f"bundled name ({', '.join(BUNDLED_MODELS)}; `maskplay models list`), or a HuggingFace Hub id, "
            "org/name or a legacy one such as bert-base-uncased (fetched when online)")


def resolve_model_dir(name: str | Path) -> Path:
    """A local directory as it is; a bundled model's name (BUNDLED_MODELS, fetched into the cache on first use
    where the installation does not carry it); otherwise a hub repository id, org/name or a legacy id without an
    organisation, downloaded through huggingface_hub (or found in its cache). A name that is none of these is one
    FileNotFoundError listing what is accepted."""
    from .models import bundled_model_dir

    path = Path(name)
    if path.exists():
        return path
    directory = bundled_model_dir(str(name))
    if directory is not None:
        return directory
    if str(name).startswith((".", "/", "~")) or not HUB_ID.fullmatch(str(name)):
        raise FileNotFoundError(model_not_found(name))
    if path.parent != Path(".") and path.parent.is_dir():  # runs/nope where runs/ is a local directory: a typo
        raise FileNotFoundError(f"{name} not found ({path.parent}/ is a local directory, so {name} is taken as a "
                                "local path, not a HuggingFace Hub repository id; write hub ids with no such directory)")
    return _from_hub(str(name))


def _from_hub(repo_id: str) -> Path:
    """snapshot_download of a model's config, weights and tokenizer; offline (runtime.download.offline), only
    its cache is looked in."""
    from .download import offline

    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise FileNotFoundError(model_not_found(repo_id, "not a local directory or a bundled model, and "
                                                         "huggingface_hub, which fetches Hub ids, is not installed: "
                                                         "pip install huggingface_hub")) from None
    try:
        return Path(snapshot_download(repo_id=repo_id, allow_patterns=[CONFIG_NAME, WEIGHTS_NAME, "tokenizer.json"],
                                      local_files_only=offline()))
    except Exception as err:  # offline, unknown repository, ...: say what was tried, in one line
        detail = " ".join(str(err).split())[:200] or type(err).__name__
        where = "not in the Hub's local cache, and maskplay is offline" if offline() else \
            f"the HuggingFace Hub did not give it: {type(err).__name__}: {detail}"
        raise FileNotFoundError(model_not_found(repo_id, f"not a local directory or a bundled model; {where}")) from None


def local_model_dir(name: str | Path) -> Path:
    """A local directory, or a bundled model's name (BUNDLED_MODELS): what a local conversion reads (never a hub
    download); anything else is a FileNotFoundError naming it."""
    from .models import bundled_model_dir

    path = Path(name)
    if not path.exists():
        directory = bundled_model_dir(str(name))
        if directory is not None:
            return directory
    if not path.is_dir():
        raise FileNotFoundError(f"maskplay model directory {name} not found (nor is it a bundled model: "
                                f"{', '.join(BUNDLED_MODELS)})")
    return path


# ---- integrity of a model directory ---------------------------------------------------------------------

MODEL_MANIFEST = "manifest.json"


def write_model_manifest(directory: str | Path) -> Path:
    """manifest.json: the sha256 and size of model.safetensors, as training checkpoints carry for each of their
    files, so that a truncated or corrupted copy is named before anything reads it. Only the weights are
    covered: config.json and tokenizer.json are text a user may legitimately edit."""
    directory = Path(directory)
    weights = directory / WEIGHTS_NAME
    manifest = {"format": 1, "files": {WEIGHTS_NAME: {"sha256": sha256(weights), "bytes": weights.stat().st_size}}}
    with atomic_path(directory / MODEL_MANIFEST) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    return directory / MODEL_MANIFEST


def verify_model_files(directory: str | Path) -> None:
    """Check the files a manifest.json lists (models written before manifests existed, or fetched from the hub,
    have none: their weights are still checked by read_weights). Raises ValueError naming the damaged file."""
    directory = Path(directory)
    path = model_file(directory, MODEL_MANIFEST)
    if not path.is_file():
        return
    try:
        files = json.loads(path.read_text())["files"]
        entries = [(name, int(e["bytes"]), str(e["sha256"])) for name, e in files.items()]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path} is damaged: not a model manifest ({type(err).__name__})") from None
    for name, size, digest in entries:
        file = file_inside(directory, name, path)
        if not file.is_file():
            raise ValueError(f"{file} is missing (listed in {path})")
        actual = file.stat().st_size
        if actual != size:
            raise ValueError(f"{file} is damaged: {actual} bytes, the manifest says {size} (truncated?)")
        if sha256(file) != digest:
            raise ValueError(f"{file} is damaged: its sha256 differs from the manifest's (corrupted)")


def read_weights(path: str | Path) -> dict[str, Tensor]:
    """A safetensors file's tensors, after the directory's manifest check; any damage is one ValueError that
    names the file (safetensors' own errors are not meant for users and can span lines). The file is one of its
    directory's (model_file: not a symbolic link out of it)."""
    path = model_file(Path(path).parent, Path(path).name)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    verify_model_files(path.parent)
    if path.stat().st_size == 0:
        raise ValueError(f"{path} is damaged: the file is empty")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{path} is damaged: not a readable safetensors file ({detail})") from None


# ---- sizes: a config.json checked against the weights' shapes before anything is built ---------------------

MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit on the JSON header
BUFFER_BYTES = 1 << 30  # a model's computed buffers (position tables, ...) at most this, or the weights' size


def read_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """The tensor shapes a safetensors file declares, from its header alone (8 bytes of length, then JSON): no
    tensor is read or allocated. A header that is not one is one ValueError naming the file."""
    path = model_file(Path(path).parent, Path(path).name)
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or not 2 <= length <= min(size - 8, MAX_HEADER_BYTES):
                raise ValueError(f"a header of {length} bytes in a file of {size}")
            header = json.loads(f.read(length))
        shapes = {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}
        if not all(isinstance(d, int) and d >= 0 for shape in shapes.values() for d in shape):
            raise ValueError("a shape that is not a list of sizes")
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as err:
        verify_model_files(path.parent)  # a truncated or corrupted copy is named as such when a manifest says so
        raise ValueError(f"{path} is damaged: not a safetensors header ({type(err).__name__}: {err})"[:300]) from None
    return shapes


def check_sizes_fit(config: ModelConfig, shapes: dict[str, tuple[int, ...]], config_source: str,
                    weights_source: str) -> None:
    """Sizes no tensor of the weights can hold are refused before a model of them is built (a config.json that
    says hidden_size 1e9 would otherwise allocate terabytes, or overflow): each width must be at most the
    weights' largest dimension, and a stack of separate layers has at least one tensor per layer. Coarse by
    design (it must hold for every family and converter); the exact comparison follows (expected_shapes)."""
    largest = max((d for shape in shapes.values() for d in shape), default=0)
    widths = {"vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
              "intermediate_size": config.ffn_width, "embedding_size": config.embedding_width,
              "key_size": config.key_width, "num_heads": config.num_heads}
    if config.positions == "learned":  # a table of max_position rows; other schemes are checked when built
        widths["max_position"] = config.max_position
    if config.type_vocab_size:
        widths["type_vocab_size"] = config.type_vocab_size
    for name, value in widths.items():
        if value > largest:
            raise ValueError(f"{config_source}: {name} = {value} does not match {weights_source}, whose largest "
                             f"tensor dimension is {largest}")
    if not config.share_layers and config.num_layers > len(shapes):
        raise ValueError(f"{config_source}: num_layers = {config.num_layers} does not match {weights_source}, which "
                         f"holds {len(shapes)} tensors in all")


def check_buffers(buffers: dict[str, tuple[tuple[int, ...], int]], weights_bytes: int, config_source: str) -> None:
    """Computed tables (sinusoidal, rotary, relative positions) grow with max_position, which no weight shows
    when positions are not learned: they must stay within BUFFER_BYTES or the weights' own size."""
    total = sum(math.prod(shape) * item for shape, item in buffers.values())
    if total > max(BUFFER_BYTES, weights_bytes):
        name = max(buffers, key=lambda k: math.prod(buffers[k][0]))
        raise ValueError(f"{config_source}: its sizes ask for {total:,} bytes of computed tables ({name}: "
                         f"{list(buffers[name][0])}), over the limit of {max(BUFFER_BYTES, weights_bytes):,} "
                         "(is max_position right?)")


def not_a_language_model(directory: str | Path) -> str:
    """The one-line error for a fine-tuned model directory given where a pretrained (language) model is expected
    (score, embed, eval, generate, MaskplayModel.from_pretrained, pretrain --init): what it is, what to use."""
    directory = Path(directory)
    what = "model"
    try:
        head = json.loads(model_file(directory, HEAD_CONFIG_NAME).read_text())
        family = json.loads(model_file(directory, CONFIG_NAME).read_text()).get("family", "")
        labels = head.get("labels") or []
        kind = (f"classifier ({len(labels)} labels: {', '.join(map(str, labels[:5]))}{', ...' if len(labels) > 5 else ''})"
                if head.get("objective") == "classify" else "regressor (one score)")
        what = f"{family} {kind}".strip() + (" of text pairs" if head.get("pair") else "")
    except (OSError, ValueError, AttributeError, TypeError):  # a damaged file: the generic description will do
        pass
    return (f"{directory} is a fine-tuned {what} written by `maskplay finetune`, not a language model: its LM head "
            "was replaced by the task's head, so it cannot score, embed, generate or start a pretraining; run it "
            f"with `maskplay predict {directory} --file FILE` (Python: maskplay.tasks.finetune.load_finetuned), or give "
            "the pretrained model it was fine-tuned from")


def write_model_dir(model: Any, out: Path, tokenizer_from: Path | None = None) -> None:
    """model.save_pretrained into a new directory `out`, with the tokenizer.json of `tokenizer_from` when it has
    one, whole or not at all (files.replace_directory)."""
    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        if tokenizer_from is not None and model_file(tokenizer_from, "tokenizer.json").is_file():
            shutil.copy2(tokenizer_from / "tokenizer.json", tmp / "tokenizer.json")

    replace_directory(Path(out), write)
