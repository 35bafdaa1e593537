"""The pretraining configuration: typed nested dataclasses, read from TOML, overridden from the command line
(`--set optim.lr=5e-4`), and written back next to the checkpoints as the run's resolved config."""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config import (
    PRESETS,
    FamilySections,
    ModelConfig,
    as_dict,
    from_dict,
    load_toml,
    preset,
    renamed_values,
    sections_as_keywords,
)
from ...registry import family_names
from ...runtime.devices import check_device_name
from ...runtime.precision import Precision
from ...runtime.precision_probe import AUTO

OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "cosine-cooldown")
PRECISIONS = (AUTO, *(p.value for p in Precision if p.trainable))  # auto, fp32, bf16, bf16-autocast
COMPILE_SCOPES = ("step", "layers", "nested")  # run.compile_scope
# ModelConfig fields that come from the tokenizer of the data, never from the training config.
TOKENIZER_FIELDS = ("vocab_size", "pad_token_id", "eos_token_id", "unk_token_id", "sos_token_id", "mask_token_id",
                    "sep_token_id", "special_token_ids")


class _ModelSectionRules(FamilySections):
    """A preset plus any architecture field overridden; None keeps the preset's value. Its fields are ModelConfig's
    (less those the tokenizer sets), each `| None = None` (model_section_fields), with the families' sections and
    [model.long] as ModelConfig has them, and family, preset and init."""

    family: str
    preset: str
    init: str

    def __post_init__(self) -> None:
        self._fill_sections("model")
        renamed_values(self)
        known = family_names()
        if not any(name == self.family for name in known):
            raise ValueError(f"model.family must be one of {known}, got {self.family!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"model.preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        if not self.init:
            # the architecture checks of ModelConfig (sizes, ELECTRA's generator) now, with the preset's
            # vocabulary, so that a bad [model] section stops the run before it writes anything
            try:
                preset(self.preset, family=self.family, **self.family_sections(),
                       **self.overrides())
            except ValueError as err:
                raise ValueError(f"model: {err}") from None

    def family_sections(self) -> dict[str, Any]:
        """The family-specific sections ([model.electra], ...), as ModelConfig takes them."""
        return dict(self.sections)

    def overrides(self) -> dict[str, Any]:
        own = ("family", "preset", "sections", "init")
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if f.name not in own and getattr(self, f.name) is not None}

    def build(self, tokenizer_fields: dict[str, Any]) -> ModelConfig:
        """The ModelConfig of this section for a vocabulary (Tokenizer.model_config_ids())."""
        if self.init:
            return self._init_config(tokenizer_fields)
        return preset(self.preset, family=self.family, **self.family_sections(),
                      **{**self.overrides(), **tokenizer_fields})

    def _init_config(self, tokenizer_fields: dict[str, Any]) -> ModelConfig:
        """The architecture of the model in `init`, as this section's family, checked against the tokenizer."""
        from ...runtime.model_dir import read_model_config

        try:
            saved = read_model_config(self.init)
        except (ValueError, FileNotFoundError) as err:
            raise type(err)(f"model.init: {err}") from None
        for name in ("vocab_size", "pad_token_id", "mask_token_id"):
            if getattr(saved, name) != tokenizer_fields[name]:
                raise ValueError(f"model.init: {self.init} has {name}={getattr(saved, name)}, the data's tokenizer "
                                 f"{tokenizer_fields[name]}: train with the tokenizer the model was trained with")
        return dataclasses.replace(saved, family=self.family, **self.family_sections(),
                                   **{**self.overrides(), **tokenizer_fields})


def model_section_fields() -> list[tuple[str, Any, Any]]:
    """ModelSection's fields, from ModelConfig's in their order: each `| None = None` (None: the preset's value),
    the tokenizer's left out, the sections (dataclasses) as they are."""
    hints = typing.get_type_hints(ModelConfig)
    fields: list[tuple[str, Any, Any]] = [("family", str, field(default="tta")), ("preset", str, field(default="mini"))]
    for f in dataclasses.fields(ModelConfig):
        hint = hints[f.name]
        if f.name == "family" or f.name in TOKENIZER_FIELDS:
            continue
        if f.default_factory is not dataclasses.MISSING:  # sections, long: a table, never None
            fields.append((f.name, hint, field(default_factory=f.default_factory, metadata=f.metadata)))
        else:
            fields.append((f.name, hint | None, field(default=None, metadata=f.metadata)))
    # a model directory whose weights start the run (e.g. a BERT for UniLM seq2seq fine-tuning): its architecture
    # is used, the preset and the size fields above are then ignored; "" = random initialisation
    fields.append(("init", str, field(default="")))
    return fields


ModelSection = sections_as_keywords(dataclasses.make_dataclass(
    "ModelSection", model_section_fields(), bases=(_ModelSectionRules,), namespace={"__module__": __name__}))
ModelSection.__doc__ = _ModelSectionRules.__doc__


@dataclass
class OptimSection:
    """AdamW with linear warmup then linear decay to 0 at max_steps. Defaults are the T-TA paper's. GPT-BERT's
    recipe pieces (docs/guides/training.md): optimizer = "lamb", schedule = "cosine-cooldown", ema."""

    lr: float = 1e-4
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-6
    warmup_steps: int = 1000
    max_steps: int = 10000
    clip: float = 1.0  # max gradient norm; 0 turns clipping off
    grad_accum: int = 1  # micro-batches per optimizer step (per process)
    optimizer: str = "adamw"  # adamw | lamb (Adam's step times a layer-wise trust ratio on the decayed weights)
    # linear: warmup to lr, linear decay to 0 | cosine-cooldown: warmup to lr, cosine to min_lr_ratio x lr at
    # max_steps - cooldown_steps, then linear to 0 over the last cooldown_steps (GPT-BERT's)
    schedule: str = "linear"
    cooldown_steps: int = 0  # cosine-cooldown only
    min_lr_ratio: float = 0.1  # cosine-cooldown only: the floor of the cosine, as a share of lr
    ema: float = 0.0  # decay of an exponential moving average of the weights, exported as final/ (0 = off)
    # the average of the trained weights alone (bias-corrected; train/ema.py), not started from the initial ones
    ema_debias: bool = False

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optim.optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"optim.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.cooldown_steps < 0:
            raise ValueError(f"optim.cooldown_steps must be >= 0, got {self.cooldown_steps}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"optim.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if not 0 <= self.ema < 1:
            raise ValueError(f"optim.ema must be in [0, 1) (0 = off), got {self.ema}")
        if self.ema_debias and not self.ema:
            raise ValueError("optim.ema_debias = true needs a moving average to correct: set optim.ema (0.999)")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"optim.lr must be a positive number, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"optim.weight_decay must be >= 0, got {self.weight_decay}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"optim.betas must be two numbers in [0, 1), got {self.betas}")
        if self.eps <= 0:
            raise ValueError(f"optim.eps must be positive, got {self.eps}")
        if self.max_steps <= 0:
            raise ValueError(f"optim.max_steps must be positive, got {self.max_steps}")
        if self.warmup_steps < 0:
            raise ValueError(f"optim.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.clip < 0:
            raise ValueError(f"optim.clip must be >= 0 (0 = off), got {self.clip}")
        if self.grad_accum <= 0:
            raise ValueError(f"optim.grad_accum must be positive, got {self.grad_accum}")


@dataclass
class DataSection:
    """`path` is a prepared directory (train/, valid/, tokenizer.json). With `corpus` and `tokenizer` instead,
    the trainer prepares RUN_DIR/data first. batch_size is the global batch, in sequences per optimizer step,
    summed over gradient accumulation and processes, so changing either leaves training the same."""

    path: str = ""
    corpus: list[str] = field(default_factory=list)
    tokenizer: str = ""
    batch_size: int = 32
    max_length: int = 128  # longer sequences are truncated (with a warning)
    seed: int = 0
    num_workers: int = 0  # DataLoader worker processes building batches; 0 = in the training process
    # on a CUDA device, each micro-batch's tensors go to the GPU through page-locked host memory, an asynchronous
    # copy (a pageable one waits until the GPU has run all it was given); ignored on other devices
    pin_memory: bool = True
    # the next step's micro-batches fetched, made into the family's batches (masking, on the host) and sent to the
    # device after this step's backward is queued and before the host waits for its loss: on a GPU the host's work
    # between steps runs while the device still computes (train/stepping.py). The same batches and random draws
    # either way, so the same weights, bitwise (tests/tasks/train/test_prepare_ahead.py)
    prepare_ahead: bool = True
    bucket_window: int = 100  # sort by length within windows of this many batches (1 = plain shuffle)
    # sequence packing: consecutive training sequences joined into rows of at most max_length pieces, each keeping
    # its [SOS] / [EOS]; batch_size then counts packed rows (held-out evaluation stays on single sequences)
    pack: bool = False
    # a sentence-length curriculum: epoch 0's first N steps ordered shortest first (the same batches); 0 = off
    curriculum_steps: int = 0
    # a batch-size ramp: the batch grows linearly from batch_ramp_start x batch_size to batch_size over the first
    # batch_ramp x optim.max_steps steps (0 = off; GPT-BERT: a quarter to full)
    batch_ramp: float = 0.0
    batch_ramp_start: float = 0.25
    # a sequence-length schedule: from step length_at[i] x optim.max_steps on, sequences (packed rows) are
    # length_to[i] pieces instead of max_length, and the batch shrinks so that batch x length stays batch_size x
    # max_length (GPT-BERT: max_length 128, length_at [0.7, 0.9], length_to [256, 512]); [] = off
    length_at: list[float] = field(default_factory=list)
    length_to: list[int] = field(default_factory=list)
    # the contiguous-stream mode (train/stream.py): the split read as one stream cut into batch_size lanes, each
    # step every row's next segment of max_length tokens of its lane (Transformer-XL's batches); held-out
    # evaluation reads the valid split the same way
    stream: bool = False

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_length", "bucket_window"):
            if getattr(self, name) <= 0:
                raise ValueError(f"data.{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.batch_ramp <= 1:
            raise ValueError(f"data.batch_ramp must be in [0, 1] (a share of optim.max_steps; 0 = off), "
                             f"got {self.batch_ramp}")
        if not 0 < self.batch_ramp_start <= 1:
            raise ValueError(f"data.batch_ramp_start must be in (0, 1], got {self.batch_ramp_start}")
        steps = self.length_at
        if any(not 0 < a < 1 for a in steps) or any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
            raise ValueError(f"data.length_at must be increasing shares of optim.max_steps in (0, 1), "
                             f"got {self.length_at}")
        if any(n <= 0 for n in self.length_to):
            raise ValueError(f"data.length_to must be positive lengths, got {self.length_to}")
        for name in ("num_workers", "curriculum_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"data.{name} must be >= 0, got {getattr(self, name)}")


@dataclass
class RunSection:
    out_dir: str = "runs/pretrain"
    eval_every: int = 500  # steps between held-out evaluations (0 = only at the start and the end)
    eval_batches: int = 20  # held-out batches of data.batch_size sequences, the same ones every time
    save_every: int = 1000  # steps between checkpoints (0 = only at the end and on a signal)
    keep_last: int = 3  # checkpoints kept; older ones are deleted
    log_every: int = 10  # steps between metrics.jsonl records
    # the host reads each step's loss and gradient norm from the device at the step's end and stops before a nan or
    # inf reaches the weights (true); or (false) only where it needs them: a logged step, an evaluation, a
    # checkpoint, a model exported at a word mark, the run's end. Then on a GPU the host never waits for the device
    # between steps, and a nan or inf still stops the run before anything after it is logged or saved, at the next
    # such point (the weights in memory are past it by then; the last checkpoint is the good state). The same
    # weights and metrics either way. One process only: under DDP the all-reduced counts are read every step
    check_every_step: bool = True
    max_minutes: float | None = None  # wall-clock budget for the training loop, resumes included
    # end the run at this step (checkpoint, export) as a spent budget does, while the learning-rate schedule still
    # runs to optim.max_steps: equal token budgets for families whose speeds differ, or on a busy machine
    stop_at_step: int | None = None
    # a words-seen budget (BabyLM's): end the run (checkpoint, export) after the step at which the source words of
    # the training sequences seen, repeats included, reach this many; words are whitespace-separated words of the
    # text, not pieces (data/words.py, counted at prepare time); the learning-rate schedule still runs to
    # optim.max_steps, so set that to about max_words / words per step (the run's start says what it is)
    max_words: int | None = None
    # words seen at which to export the model as RUN_DIR/words/<N> (1M, 10M, ...), a directory
    # MaskplayModel.from_pretrained reads, like final/ (BabyLM 2025: every 1M to 10M, then every 10M to 100M)
    checkpoint_at_words: list[int] = field(default_factory=list)
    # Transformer-XL's segment recurrence (needs data.stream): each layer's input over the last memory_length
    # tokens of a row's lane carried to its next segment, no gradient through it (train/stream.py); 0 = off
    memory_length: int = 0
    # auto (bf16 where this machine runs it faster, else fp32; resolved at run start, see precision_probe) | fp32 |
    # bf16 (weights cast to bf16 at each forward, activations bf16 end to end) | bf16-autocast (torch.autocast);
    # in every case parameters, gradients, AdamW state and checkpoints stay fp32
    precision: str = AUTO
    device: str = "auto"  # auto (cuda when available, else cpu) | cpu | cuda | cuda:N
    # torch.compile the training forward and backward (train/stepping.py), in any precision: on a GPU worth its
    # minute or so of compiling in runs longer than that
    compile: bool = False
    # what run.compile compiles: "step" (the whole forward and its loss, every layer unrolled into one graph) |
    # "layers" (each block alone, one compiled code reused by every layer, the rest eager: a compile that costs one
    # block, not num_layers; nn/regional.py) | "nested" (the whole step in one graph, each block in it a nested compile
    # region traced and compiled once for every layer). docs/guides/training.md and
    # docs/results/training-speed.md ("Compiling a recipe") compare them
    compile_scope: str = "step"
    # attention under a materialised mask (T-TA's, GPT-BERT's mixed batches, UniLM's, XLNet's, padding, and the
    # position terms of disentangled attention and Transformer-XL/XLNet) through FlexAttention, compiled: the mask
    # and the terms read inside the kernel, no score bias. The same values; a CUDA device only. nn/attention/flex.py,
    # docs/guides/training.md
    flex_attention: bool = False
    deterministic: bool = False  # torch.use_deterministic_algorithms (CUDA needs it for bitwise resumes)
    threads: int | None = None  # torch.set_num_threads; None leaves torch's default
    progress: bool = True  # tqdm progress bar on stderr (rank 0)
    tensorboard: bool = True  # also write TensorBoard logs when the tensorboard package is installed
    # under torchrun: how long a process waits in a collective for a peer that has stopped answering before the
    # run stops with an error naming the checkpoint to resume from (a peer that dies is noticed at once). Longer
    # than any step, evaluation or checkpoint write of rank 0 alone; corpus preparation waits without it.
    dist_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.dist_timeout_s) and self.dist_timeout_s > 0):
            raise ValueError(f"run.dist_timeout_s must be a positive number of seconds, got {self.dist_timeout_s}")
        for name in ("eval_every", "save_every", "eval_batches", "log_every", "keep_last"):
            if getattr(self, name) < 0:
                raise ValueError(f"run.{name} must be >= 0, got {getattr(self, name)}")
        if self.keep_last < 1:
            raise ValueError(f"run.keep_last must be at least 1, got {self.keep_last}")
        if self.log_every < 1:
            raise ValueError(f"run.log_every must be at least 1, got {self.log_every}")
        if self.stop_at_step is not None and self.stop_at_step < 1:
            raise ValueError(f"run.stop_at_step must be at least 1 (leave it out to run to optim.max_steps), "
                             f"got {self.stop_at_step}")
        if self.max_words is not None and self.max_words < 1:
            raise ValueError(f"run.max_words must be at least 1 (leave it out for no words budget), "
                             f"got {self.max_words}")
        marks = self.checkpoint_at_words
        if any(w < 1 for w in marks) or any(b <= a for a, b in zip(marks, marks[1:], strict=False)):
            raise ValueError(f"run.checkpoint_at_words must be increasing positive word counts, got {marks}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"run.max_minutes must be positive (leave it out for no budget), got {self.max_minutes}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"run.precision must be one of {PRECISIONS}, got {self.precision!r}")
        check_device_name(self.device, "run.device")
        if self.memory_length < 0:
            raise ValueError(f"run.memory_length must be >= 0 (0 = no memory), got {self.memory_length}")
        if self.threads is not None and self.threads <= 0:
            raise ValueError(f"run.threads must be positive, got {self.threads}")
        if self.compile_scope not in COMPILE_SCOPES:
            raise ValueError(f"run.compile_scope must be one of {COMPILE_SCOPES}, got {self.compile_scope!r}")
        if self.compile_scope in ("layers", "nested") and self.memory_length:
            raise ValueError(f"run.compile_scope = {self.compile_scope!r} compiles the blocks of a pass without memory: "
                             "not with run.memory_length (use 'step')")


@dataclass
class TrainConfig:
    model: ModelSection = field(default_factory=ModelSection)
    optim: OptimSection = field(default_factory=OptimSection)
    data: DataSection = field(default_factory=DataSection)
    run: RunSection = field(default_factory=RunSection)

    def validate(self) -> TrainConfig:
        """Checks across fields, made once every override is in (each field checks itself when set)."""
        if self.optim.warmup_steps > self.optim.max_steps:
            raise ValueError(f"optim.warmup_steps={self.optim.warmup_steps} exceeds optim.max_steps="
                             f"{self.optim.max_steps}")
        if self.data.path and self.data.corpus:
            raise ValueError("set data.path (a prepared directory) or data.corpus (files to prepare), not both")
        budget, marks = self.run.max_words, self.run.checkpoint_at_words
        if budget is not None and marks and marks[-1] > budget:
            beyond = [w for w in marks if w > budget]
            raise ValueError(f"run.checkpoint_at_words {', '.join(f'{w:,}' for w in beyond)} lie beyond "
                             f"run.max_words={budget:,}: the run ends before it sees so many words")
        optim, data = self.optim, self.data
        if optim.cooldown_steps and optim.schedule != "cosine-cooldown":
            raise ValueError(f"optim.cooldown_steps={optim.cooldown_steps} needs optim.schedule = "
                             f"\"cosine-cooldown\" (the {optim.schedule!r} schedule has no cooldown)")
        if optim.warmup_steps + optim.cooldown_steps > optim.max_steps:
            raise ValueError(f"optim.warmup_steps + optim.cooldown_steps = {optim.warmup_steps} + "
                             f"{optim.cooldown_steps} exceeds optim.max_steps={optim.max_steps}")
        if len(data.length_at) != len(data.length_to):
            raise ValueError(f"data.length_at ({len(data.length_at)} shares) and data.length_to "
                             f"({len(data.length_to)} lengths) must be as long as each other")
        if self.run.memory_length and not data.stream:
            raise ValueError("run.memory_length carries memory from a row's segment to the next segment of its "
                             "document: set data.stream = true")
        if data.stream:
            clash = [name for name, on in (("data.pack", data.pack), ("data.batch_ramp", data.batch_ramp),
                                           ("data.length_at", data.length_at),
                                           ("data.curriculum_steps", data.curriculum_steps)) if on]
            if clash:
                raise ValueError(f"data.stream cuts the split into fixed lanes of segments: not with {clash[0]}")
        if data.batch_ramp or data.length_at:
            for name, off in (("bucket_window", 1), ("curriculum_steps", 0)):
                if getattr(data, name) != off:
                    raise ValueError(f"data.batch_ramp / data.length_at draw batches of changing sizes from a "
                                     f"plain seeded shuffle: set data.{name} = {off} (got {getattr(data, name)})")
        return self

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_toml(self) -> str:
        """TOML that load_train_config reads back to an equal config (None fields are left out)."""
        lines: list[str] = []
        for section, values in self.to_dict().items():
            _toml_table(lines, section, values)
        return "\n".join(lines)


def _toml_table(lines: list[str], name: str, values: dict[str, Any]) -> None:
    lines.append(f"[{name}]")
    tables = {k: v for k, v in values.items() if isinstance(v, dict)}
    for key, value in values.items():
        if value is not None and key not in tables:
            lines.append(f"{key} = {_toml_value(value)}")
    lines.append("")
    for key, value in tables.items():
        _toml_table(lines, f"{name}.{key}", value)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # Python's repr of a float is valid TOML and round-trips exactly
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def train_config_from_dict(data: dict[str, Any], source: str = "config") -> TrainConfig:
    return from_dict(TrainConfig, data, source=source)


def load_train_config(path: str | Path) -> TrainConfig:
    """Read a TOML file, or a shipped recipe by name (`mini-tta`: recipes.py); unknown sections or keys are errors
    that name them and the file."""
    from .recipes import recipe_names, resolve_recipe

    path = resolve_recipe(path)
    if path.is_dir():
        raise ValueError(f"config file {path} is a directory; give a .toml file")
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} not found, nor is it a shipped recipe: {recipe_names()}")
    if path.suffix == ".json":
        from ...runtime.files import read_json_object

        return train_config_from_dict(read_json_object(path), source=str(path))
    return load_toml(TrainConfig, path)


# Fields a resumed run may change without changing what it computes (budgets, logging, where it runs).
RESUMABLE_CHANGES = frozenset({
    "optim.max_steps", "optim.grad_accum", "data.num_workers", "data.pin_memory", "data.prepare_ahead", "data.path",
    "data.corpus", "data.tokenizer",
    "run.out_dir", "run.eval_every", "run.eval_batches", "run.save_every", "run.keep_last", "run.log_every",
    "run.check_every_step",
    "run.max_minutes", "run.stop_at_step", "run.max_words", "run.checkpoint_at_words", "run.device", "run.threads",
    "run.progress", "run.tensorboard", "run.compile", "run.compile_scope", "run.flex_attention",
    "run.deterministic", "run.dist_timeout_s",
})


def config_differences(old: TrainConfig, new: TrainConfig) -> list[str]:
    """Dotted names of the fields that differ between two configs."""
    a, b = old.to_dict(), new.to_dict()
    return [f"{section}.{key}" for section in a for key in a[section] if a[section][key] != b[section][key]]
