"""What a run checks and sets up before its first step: the resolved config on disk, the checks that reject a
config or data early, the precision every process uses, the initial weights and the RNG seeds."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from ...config import ModelConfig
from ...data.dataset import TokenDataset
from ...families import MaskplayModel, family_class
from ...runtime.files import OutputLock, atomic_path, prepare_output_dir
from ...runtime.precision import Precision
from ...runtime.precision_probe import AUTO
from ...runtime.precision_probe import resolve as resolve_precision
from .config import TrainConfig
from .distributed import Dist, broadcast_int

RESOLVED_CONFIG = "config.toml"
Log = Callable[[str], None]


def seed_everything(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextlib.contextmanager
def hold_run_directory(run_dir: Path, d: Dist) -> Iterator[None]:
    """Rank 0 holds a lock on the run directory (RUN_DIR/../.NAME.lock) for the whole run, so that a second run
    given the same --out, started or resumed while this one trains, stops at once with a one-line error instead
    of the two writing the same checkpoints. Every process learns whether rank 0 got it."""
    lock, error = None, None
    if d.is_main:
        try:
            prepare_output_dir(run_dir, "run.out_dir (--out)")
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            lock = OutputLock(run_dir, "run.out_dir (--out)").__enter__()
        except ValueError as err:
            error = err
    if broadcast_int(d, error is not None):
        raise error or ValueError(f"run.out_dir (--out) {run_dir}: process 0 could not take the run directory "
                                  "(its error says why)")
    try:
        yield
    finally:
        if lock is not None:
            lock.__exit__()


def write_resolved_config(run_dir: Path, config: TrainConfig) -> None:
    with atomic_path(run_dir / RESOLVED_CONFIG) as tmp:
        tmp.write_text(config.to_toml())


def undo_start(run_dir: Path, created: bool, wrote_config: bool) -> None:
    """After a start that failed validation: remove the config.toml this start wrote and the run directory it
    created, unless something else is in them by now (a prepared corpus is kept)."""
    if wrote_config:
        (run_dir / RESOLVED_CONFIG).unlink(missing_ok=True)
    if created:
        with contextlib.suppress(OSError):
            run_dir.rmdir()  # only if empty


def check_batch_split(config: TrainConfig, d: Dist) -> None:
    per = config.optim.grad_accum * d.world_size
    if config.data.batch_size % per:
        raise ValueError(f"data.batch_size={config.data.batch_size} must be divisible by optim.grad_accum "
                         f"({config.optim.grad_accum}) x processes ({d.world_size}) = {per}")
    if config.run.memory_length and d.world_size > 1:
        raise ValueError("run.memory_length is built for one process: its checkpoints keep one process's memory "
                         f"(got {d.world_size} processes)")


def check_data(config: TrainConfig, model_config: ModelConfig, train_data: TokenDataset, data_dir: Path) -> None:
    cfg, mc = config, model_config
    if cfg.data.max_length > mc.max_position:
        raise ValueError(f"data.max_length={cfg.data.max_length} exceeds the model's max_position="
                         f"{mc.max_position} (set model.max_position or data.max_length)")
    if cfg.data.length_to and max(cfg.data.length_to) > mc.max_position:
        raise ValueError(f"data.length_to={cfg.data.length_to} exceeds the model's max_position="
                         f"{mc.max_position} (set model.max_position or data.length_to)")
    meta_vocab = train_data.meta.get("vocab_size")
    if meta_vocab is not None and meta_vocab > mc.vocab_size:
        raise ValueError(f"{train_data.directory}/meta.json says vocab_size={meta_vocab}, more than the "
                         f"{mc.vocab_size} of the tokenizer in {data_dir}")
    if cfg.run.memory_length:
        family_class(mc.family).check_memory(mc)
    if len(train_data) < cfg.data.batch_size and not cfg.data.stream:
        raise ValueError(f"{train_data.directory} has {len(train_data)} sequences, fewer than one "
                         f"batch of data.batch_size={cfg.data.batch_size}")


def run_precision(config: TrainConfig, d: Dist, model_config: ModelConfig, micro: int, log: Log) -> Precision:
    """run.precision for this machine (auto: probed on rank 0, cached; every process uses rank 0's choice)."""
    choice = None
    if d.is_main:
        choice = resolve_precision(config.run.precision, d.device, model_config,
                                   rows=micro * config.data.max_length, warn=log)
        if config.run.precision == AUTO:
            log(choice.describe())
    options = list(Precision)
    return options[broadcast_int(d, options.index(choice.precision) if choice else 0)]


def initialise_from(model: MaskplayModel, model_config: ModelConfig, directory: str, log: Log) -> None:
    """Copy the weights of a saved model (strict: every weight of this model must be there, nothing else)."""
    from ...runtime.model_dir import WEIGHTS_NAME, resolve_model_dir

    path = resolve_model_dir(directory) / WEIGHTS_NAME
    model.load_weights(path, source=f"model.init {path}")
    log(f"initialised the {model_config.family} model from {path}")
