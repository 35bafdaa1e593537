"""What every family shares: construction, initialisation, input checks, the loss, and checkpoints
(safetensors weights + JSON config; loading is strict and never unpickles)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from .backbone import Embeddings, Encoder
from .config import ModelConfig, from_dict
from .heads import LMHead
from .masks import MaskMod, and_masks, materialize, padding
from .outputs import ModelOutput
from .positions import RelativePositions

IGNORE_INDEX = -100
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"


class MaskplayModel(nn.Module):
    family: ClassVar[str] = ""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.family != self.family:
            raise ValueError(f"{type(self).__name__} needs a config with family={self.family!r}, "
                             f"got {config.family!r}")
        self.config = config
        self.embeddings = self.make_embeddings(config)
        # embeddings narrower (or wider) than the blocks: one projection into the hidden size
        width = config.embedding_width
        self.embeddings_project = nn.Linear(width, config.hidden_size) if width != config.hidden_size else None
        self.encoder = Encoder(config)
        self.head = self.make_head(config)
        self.apply(self._init_weights)
        if config.norm_placement == "deepnorm":
            from .norms import deepnorm_init_

            deepnorm_init_(self.encoder, config.num_layers)

    def make_embeddings(self, config: ModelConfig) -> nn.Module:
        """The family's input embeddings; BERT's (token + position [+ segment], LayerNorm) unless it says otherwise."""
        return Embeddings(config)

    def make_head(self, config: ModelConfig) -> nn.Module:
        """The family's output head; the tied masked-LM head unless a family says otherwise."""
        return LMHead(config)

    def encode_under(self, structure: MaskMod, input_ids: Tensor, attention_mask: Tensor,
                     token_type_ids: Tensor | None = None, output_hidden_states: bool = False,
                     query_positions: Tensor | None = None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """The backbone on one stream under a structural mask (joined with the padding here): what BERT,
        UniLM, ELECTRA's discriminator and GPT share; the family's mask is the only difference."""
        B, L = input_ids.shape
        mask = materialize(and_masks(structure, padding(attention_mask)), B, L, device=input_ids.device)
        return self.encoder(self.embed(input_ids, token_type_ids), mask, output_hidden_states=output_hidden_states,
                            query_positions=query_positions,
                            tokens=self._real_tokens(attention_mask, query_positions))

    def embed(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
              dropout: nn.Module | None = None) -> Tensor:
        """The embedding output at the hidden size: what the first block reads."""
        x = self.embeddings(input_ids, token_type_ids, dropout=dropout)
        return x if self.embeddings_project is None else self.embeddings_project(x)

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, RelativePositions):
            module.reset_parameters(std)

    # ---- inputs -------------------------------------------------------------------------------------

    def check_inputs(self, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """Validate a batch and return its attention mask ((B, L) bool; default: ids != [PAD])."""
        cfg = self.config
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
            raise ValueError("input_ids must be a 2-D (batch, length) tensor of token ids, got "
                             f"{getattr(input_ids, 'shape', type(input_ids))}")
        batch, length = input_ids.shape
        if batch == 0 or length == 0:
            raise ValueError(f"empty batch: input_ids has shape {tuple(input_ids.shape)}")
        if length > cfg.max_position:
            raise ValueError(f"sequence length {length} exceeds the model's {cfg.max_position} positions; "
                             "truncate or split the input")
        if input_ids.dtype not in (torch.long, torch.int, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"input_ids must be integer token ids, got dtype {input_ids.dtype}")
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= cfg.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is out of range for a vocabulary of {cfg.vocab_size} "
                             f"(ids seen: {lo}..{hi})")
        if attention_mask is None:
            return input_ids != cfg.pad_token_id
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} differs from input_ids "
                             f"shape {tuple(input_ids.shape)}")
        return attention_mask.bool()

    def training_batch(self, input_ids: Tensor, attention_mask: Tensor,
                       generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Turn a clean padded batch into this family's forward() arguments, labels included."""
        labels = input_ids.masked_fill(~attention_mask.bool(), IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    # ---- outputs ------------------------------------------------------------------------------------

    def _real_tokens(self, attention_mask: Tensor, query_positions: Tensor | None = None) -> Tensor | None:
        """What Encoder.forward's `tokens` gets: at inference (eval mode, no autograd) a batch with padding runs
        its per-token layers on the real tokens only (outputs at the padding are then zero); training keeps
        the padded layout."""
        if self.training or torch.is_grad_enabled() or query_positions is not None:
            return None
        real = int(attention_mask.sum())
        return None if real in (0, attention_mask.numel()) else attention_mask  # no padding, or nothing but

    @staticmethod
    def _query_positions(query_positions: Tensor | None, labels: Tensor | None) -> Tensor | None:
        if query_positions is not None and labels is not None:
            raise ValueError("query_positions (one output position per row, for scoring) cannot be combined with "
                             "labels, whose loss needs the outputs at every labelled position")
        return query_positions

    def logits(self, hidden: Tensor) -> Tensor:
        return self.head(hidden, self.embeddings.word.weight)

    def output(self, hidden: Tensor, labels: Tensor | None, states: tuple[Tensor, ...] | None) -> ModelOutput:
        """The head at labelled positions only (all positions without labels), and the mean token loss."""
        if labels is None:
            return ModelOutput(logits=self._deferred_logits(hidden), last_hidden_state=hidden, hidden_states=states)
        selected = labels != IGNORE_INDEX
        selected_hidden = hidden[selected]
        loss = self.head.loss(selected_hidden, self.embeddings.word.weight, labels[selected])
        return ModelOutput(loss=loss, logits=self._deferred_logits(selected_hidden), last_hidden_state=hidden,
                           hidden_states=states)

    def _deferred_logits(self, hidden: Tensor) -> Callable[[], Tensor]:
        """The head's logits, computed on first access (features and losses never need them), under the
        grad / inference mode of the forward pass that produced `hidden`."""
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

        def compute() -> Tensor:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                return self.logits(hidden)

        return compute

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def generate(self, inputs: Any, **options: Any) -> Any:
        """Continue texts or token ids: maskplay.generation.generate (greedy, beam search, sampling; a key/value
        cache). A family without the generation hooks raises ValueError naming the families that have them."""
        from .generation import generate

        return generate(self, inputs, **options)

    # ---- checkpoints --------------------------------------------------------------------------------

    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = None) -> None:
        """Write config.json and model.safetensors (optionally cast, e.g. to fp16), each atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous().cpu()
                   for k, v in self.state_dict().items()}
        with _atomic_path(directory / WEIGHTS_NAME) as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt", "family": self.family})
        with _atomic_path(directory / CONFIG_NAME) as tmp:
            tmp.write_text(json.dumps(self.config.to_dict(), indent=2) + "\n")
        write_model_manifest(directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path, **config_overrides: Any) -> MaskplayModel:
        """Load a model saved by save_pretrained, from a directory or a hub name ("org/name", fetched with
        huggingface_hub). Called on MaskplayModel it builds the saved family."""
        directory = resolve_model_dir(directory)
        config = read_model_config(directory, **config_overrides)
        weights_path = directory / WEIGHTS_NAME
        if not weights_path.is_file():
            raise FileNotFoundError(f"{weights_path} not found: is {directory} a directory written by save_pretrained?")
        model_cls = cls if cls.family else family_class(config.family)
        model = model_cls(config)
        model.load_weights(weights_path)
        return model

    def load_weights(self, path: str | Path, source: str | None = None) -> None:
        """Strictly load a model.safetensors (checked against its manifest), floating-point tensors as fp32 (an
        fp16 export included)."""
        state = read_weights(path)
        self.load_strict({k: v.float() if v.is_floating_point() else v for k, v in state.items()},
                         source=source or str(path))

    def load_strict(self, state: dict[str, Tensor], source: str = "state dict") -> None:
        """load_state_dict that names every missing, unexpected or misshapen weight in its error."""
        own = self.state_dict()
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        shapes = [f"{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
                  for k in own if k in state and state[k].shape != own[k].shape]
        if missing or unexpected or shapes:
            raise ValueError(f"{source} does not match {type(self).__name__}: missing {missing}, "
                             f"unexpected {unexpected}, wrong shapes {shapes}")
        self.load_state_dict(state, strict=True)


def read_model_config(directory: str | Path, **overrides: Any) -> ModelConfig:
    """The ModelConfig in a model directory (a bundled name or hub id resolved first); a missing or damaged
    config.json is one error naming it."""
    config_path = resolve_model_dir(directory) / CONFIG_NAME
    if (config_path.parent / "head_config.json").is_file():  # `maskplay finetune` wrote it: no LM head to load
        from .finetune import not_a_language_model

        raise ValueError(not_a_language_model(config_path.parent))
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found: is {config_path.parent} a directory written by "
                                "save_pretrained?")
    try:
        data = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{config_path} is damaged: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{config_path} is damaged: a JSON object was expected")
    return from_dict(ModelConfig, {**data, **overrides}, source=str(config_path))


ASSETS = Path(__file__).resolve().parent / "assets"
# Models shipped inside the package, usable by name anywhere a model directory is expected.
BUNDLED_MODELS = {"tta-mini-wiki": ASSETS / "tta-mini-wiki", "gpt-mini-wiki": ASSETS / "gpt-mini-wiki",
                  "unilm-titles-mini": ASSETS / "unilm-titles-mini"}


def resolve_model_dir(name: str | Path) -> Path:
    """A local directory as it is; a bundled model's name (BUNDLED_MODELS); otherwise a hub repository id,
    downloaded (or found in the local cache)."""
    path = Path(name)
    if str(name) in BUNDLED_MODELS and not path.exists():
        return BUNDLED_MODELS[str(name)]
    if path.exists() or str(name).count("/") != 1 or str(name).startswith((".", "/")):
        return path
    try:
        from huggingface_hub import snapshot_download
    except ImportError as err:
        raise FileNotFoundError(f"{name} is not a local directory, and huggingface_hub (needed to fetch it from "
                                "the hub) is not installed: pip install huggingface_hub") from err
    try:
        return Path(snapshot_download(repo_id=str(name), allow_patterns=[CONFIG_NAME, WEIGHTS_NAME, "tokenizer.json"]))
    except Exception as err:  # offline, unknown repository, ...: say what was tried
        raise FileNotFoundError(f"{name} is not a local directory and could not be fetched from the hub: {err}") from err


# ---- integrity of a model directory ---------------------------------------------------------------------

MODEL_MANIFEST = "manifest.json"


def sha256(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (model manifests and training checkpoints)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_model_manifest(directory: str | Path) -> Path:
    """manifest.json: the sha256 and size of model.safetensors, as training checkpoints carry for each of their
    files, so that a truncated or corrupted copy is named before anything reads it. Only the weights are
    covered: config.json and tokenizer.json are text a user may legitimately edit."""
    directory = Path(directory)
    weights = directory / WEIGHTS_NAME
    manifest = {"format": 1, "files": {WEIGHTS_NAME: {"sha256": sha256(weights), "bytes": weights.stat().st_size}}}
    with _atomic_path(directory / MODEL_MANIFEST) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    return directory / MODEL_MANIFEST


def verify_model_files(directory: str | Path) -> None:
    """Check the files a manifest.json lists (models written before manifests existed, or fetched from the hub,
    have none: their weights are still checked by read_weights). Raises ValueError naming the damaged file."""
    directory = Path(directory)
    path = directory / MODEL_MANIFEST
    if not path.is_file():
        return
    try:
        files = json.loads(path.read_text())["files"]
        entries = [(name, int(e["bytes"]), str(e["sha256"])) for name, e in files.items()]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path} is damaged: not a model manifest ({type(err).__name__})") from None
    for name, size, digest in entries:
        file = directory / name
        if not file.is_file():
            raise ValueError(f"{file} is missing (listed in {path})")
        actual = file.stat().st_size
        if actual != size:
            raise ValueError(f"{file} is damaged: {actual} bytes, the manifest says {size} (truncated?)")
        if sha256(file) != digest:
            raise ValueError(f"{file} is damaged: its sha256 differs from the manifest's (corrupted)")


def read_weights(path: str | Path) -> dict[str, Tensor]:
    """A safetensors file's tensors, after the directory's manifest check; any damage is one ValueError that
    names the file (safetensors' own errors are not meant for users and can span lines)."""
    path = Path(path)
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


# ---- output files -------------------------------------------------------------------------------------------

def prepare_output_file(path: str | Path, what: str = "--out") -> Path:
    """Check that `path` can be written as a file (it is not a directory, no parent is a file) and create its
    parent directories, so that these mistakes are one-line errors naming the argument."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory; give a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{what} {path}: {parent} is a file, not a directory")
            break
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def prepare_output_dir(path: str | Path, what: str = "--out") -> Path:
    """The same for an output directory: it may exist as a directory, not as a file, nor below a file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is a file; give a directory")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{what} {path}: {parent} is a file, not a directory")
            break
    return path


class OutputLock:
    """An exclusive lock on an output file for as long as it is written (filelock, on the hidden file
    .NAME.lock beside it), so that two processes never write the same --out: the second gets a one-line error
    instead of silently overwriting the first's result."""

    def __init__(self, path: str | Path, what: str = "--out") -> None:
        from filelock import FileLock

        self.path, self.what = Path(path), what
        self.lock = FileLock(str(self.path.parent / f".{self.path.name}.lock"), timeout=0)

    def __enter__(self) -> OutputLock:
        from filelock import Timeout

        try:
            self.lock.acquire()
        except Timeout:
            raise ValueError(f"{self.what} {self.path} is being written by another process (it holds "
                             f"{self.lock.lock_file}); wait for it to finish or choose another {self.what}") from None
        return self

    def __exit__(self, *_: object) -> None:
        self.lock.release()


def _umask() -> int:
    # os.umask can only be read by setting it; put it straight back
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class _atomic_path:
    """Write to a temporary file in the same directory, fsync, then rename over the target. The file gets the
    permissions of any file the user creates (0666 less the umask), not mkstemp's private 0600."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __enter__(self) -> Path:
        if self.target.is_dir():
            raise ValueError(f"{self.target} is a directory; give a file name")
        if not self.target.parent.is_dir():
            prepare_output_file(self.target, what="output")
        fd, name = tempfile.mkstemp(prefix=f".{self.target.name}.", dir=self.target.parent)
        try:
            os.fchmod(fd, 0o666 & ~_umask())
        finally:
            os.close(fd)
        self.tmp = Path(name)
        return self.tmp

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is not None:
            self.tmp.unlink(missing_ok=True)
            return
        try:
            # again here: a writer that recreates the file (safetensors' save_file does) drops the mode set above
            os.chmod(self.tmp, 0o666 & ~_umask())
            with open(self.tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(self.tmp, self.target)
        except OSError as err:  # e.g. the target became a directory meanwhile: leave no temporary file behind
            self.tmp.unlink(missing_ok=True)
            raise ValueError(f"cannot write {self.target}: {err.strerror or err}") from None
        fsync_dir(self.target.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_path(target: str | Path) -> _atomic_path:
    return _atomic_path(Path(target))


def family_class(family: str) -> type[MaskplayModel]:
    from .families import FAMILY_CLASSES

    if family not in FAMILY_CLASSES:
        raise ValueError(f"unknown family {family!r}; choose one of {sorted(FAMILY_CLASSES)}")
    return FAMILY_CLASSES[family]


def build_model(config: ModelConfig) -> MaskplayModel:
    return family_class(config.family)(config)
