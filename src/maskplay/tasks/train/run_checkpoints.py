"""The run's side of checkpoints (the files themselves are checkpoint_files.py's): which one to resume from, whether
this run may resume it, restoring every piece of state from it, and saving the current state as one."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from ...config import ModelConfig, from_dict
from ...families import MaskplayModel
from ...runtime.precision import Precision
from ...runtime.precision_probe import AUTO
from .checkpoint_files import (
    CONFIG_FILE,
    MODEL_CONFIG_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    RNG_FILE,
    STATE_FILE,
    CheckpointError,
    checkpoint_name,
    latest_valid_checkpoint,
    list_checkpoints,
    optimizer_from_tensors,
    optimizer_to_tensors,
    prune_checkpoints,
    read_json,
    read_tensors,
    rng_from_tensors,
    rng_to_tensors,
    verify_checkpoint,
    write_checkpoint,
)
from .config import RESUMABLE_CHANGES, TrainConfig, config_differences, train_config_from_dict
from .distributed import Dist, all_gather, barrier, broadcast_int
from .ema import EMA_FILE, WeightEma
from .schedule import schedule_state
from .state import TrainState
from .stream import MEMORY_FILE, SegmentMemory

Log = Callable[[str], None]
# what a failed write raises: OSError from Python's writes, SafetensorError from safetensors' own (Rust) writer
WRITE_ERRORS = (OSError, SafetensorError)


def write_error(err: Exception) -> str:
    """"No space left on device (model.safetensors)", or safetensors' "I/O error: File too large (os error 27)"."""
    if isinstance(err, OSError):
        return (err.strerror or str(err)) + (f" ({Path(err.filename).name})" if err.filename else "")
    return str(err).removeprefix("Error while serializing: ")


def choose_checkpoint(run_dir: Path, d: Dist, resume: bool, resume_from: str | Path | None,
                      log: Log) -> Path | None:
    """Rank 0 picks (and verifies) the checkpoint; every process loads the one it picked."""
    if resume_from is not None:
        path = Path(resume_from)
        if not path.is_dir():
            raise FileNotFoundError(f"checkpoint {path} not found")
        if d.is_main:
            verify_checkpoint(path)  # an explicit choice gets no fallback
        barrier(d)
        return path
    existing = list_checkpoints(run_dir)
    if not resume:
        if existing:
            raise ValueError(f"{run_dir} already has checkpoints (newest {existing[-1][1].name}); "
                             "pass --resume to continue that run, or choose another --out")
        return None
    step = -1
    if d.is_main:
        try:
            path = latest_valid_checkpoint(run_dir, warn=lambda m: log(f"WARNING: {m}"))
        except CheckpointError:
            broadcast_int(d, -2)
            raise
        if path is None:
            log(f"--resume: {run_dir} has no checkpoint yet; starting from step 0")
        else:
            step = int(read_json(path / STATE_FILE)["step"])
    step = broadcast_int(d, step)
    if step == -2:
        raise CheckpointError(f"rank 0 found no usable checkpoint in {run_dir}")
    return None if step < 0 else run_dir / checkpoint_name(step)


def checkpoint_step(path: Path) -> int:
    return int(read_json(path / STATE_FILE)["step"])


class CheckpointWriteError(ValueError):
    """A checkpoint could not be written (a ValueError, so the command line reports it in one line)."""


class Checkpointer:
    """Saves and restores everything a bitwise-exact resumption needs: weights, AdamW state, the run's counters
    (state.json), every process's RNG streams and, with optim.ema, the weights' moving average (ema.safetensors)."""

    def __init__(self, config: TrainConfig, d: Dist, run_dir: Path, model: MaskplayModel, model_config: ModelConfig,
                 optimizer: torch.optim.Optimizer, generator: torch.Generator, precision: Precision,
                 log: Log, ema: WeightEma | None = None, memory: SegmentMemory | None = None) -> None:
        self.ema = ema
        self.memory = memory  # run.memory_length: the memory the next step reads (stream.py)
        self.config, self.d, self.run_dir = config, d, run_dir
        self.model, self.model_config = model, model_config
        self.optimizer, self.generator, self.precision = optimizer, generator, precision
        self.log = log

    def _check_resumable(self, path: Path, data_dir: Path) -> dict[str, Any]:
        """Raise unless this run's config and model are the checkpoint's, up to RESUMABLE_CHANGES; returns the
        checkpoint's state.json."""
        cfg = self.config
        saved = train_config_from_dict(read_json(path / CONFIG_FILE), source=str(path / CONFIG_FILE))
        changed = config_differences(saved, cfg)
        state = read_json(path / STATE_FILE)
        # run.precision: what matters is the precision the checkpoint was trained in (state.json's, or the saved
        # config's for a checkpoint older than `auto`); a saved `auto` re-resolves on this machine
        used = state.get("precision", saved.run.precision)
        if "run.precision" in changed and used == self.precision.value:
            changed.remove("run.precision")
        elif saved.run.precision == AUTO and cfg.run.precision == AUTO and used != self.precision.value:
            self.log(f"WARNING: run.precision auto resolved to {self.precision.value} on this machine, but "
                     f"{path.name} was trained in {used}: the run goes on in {self.precision.value} (not bitwise "
                     "the run an uninterrupted one would have been)")
        fixed = [k for k in changed if k not in RESUMABLE_CHANGES]
        if fixed:
            raise ValueError(f"cannot resume from {path}: these settings differ from the run's "
                             f"{path / CONFIG_FILE}: {fixed}. Resume with the same config (it is saved in "
                             "the run directory) or start a new run")
        if self.memory is not None and "optim.grad_accum" in changed:
            raise ValueError(f"cannot resume from {path} with another optim.grad_accum: its memory "
                             "(run.memory_length) is kept per micro-batch of lanes")
        if changed:
            self.log(f"resuming with changed settings: {changed}")
        if "optim.max_steps" in changed:
            self.log("WARNING: optim.max_steps changed, so the learning-rate decay changes from here on")
        saved_model = from_dict(ModelConfig, read_json(path / MODEL_CONFIG_FILE), source=str(path / MODEL_CONFIG_FILE))
        if saved_model != self.model_config:
            raise ValueError(f"cannot resume from {path}: its model config differs from the one built now "
                             f"(the tokenizer of {data_dir} differs?)")
        return state

    def load(self, path: Path, data_dir: Path) -> TrainState:
        """Restore weights, optimizer and RNG streams from checkpoint `path`; returns its counters."""
        d = self.d
        state = self._check_resumable(path, data_dir)
        self.model.load_strict({k: v.to(d.device) for k, v in read_tensors(path / MODEL_FILE).items()},
                               source=str(path / MODEL_FILE))
        optimizer_from_tensors(self.optimizer, read_tensors(path / OPTIMIZER_FILE), state["optimizer_param_groups"],
                               source=str(path / OPTIMIZER_FILE))
        if self.ema is not None:  # optim.ema is the checkpoint's (a changed one is refused above)
            if not (path / EMA_FILE).is_file():
                raise CheckpointError(f"{path / EMA_FILE} is missing: optim.ema is on but the checkpoint has no "
                                      "moving average")
            self.ema.load(read_tensors(path / EMA_FILE), source=str(path / EMA_FILE))
        if self.memory is not None:  # run.memory_length is the checkpoint's (a changed one is refused above)
            if not (path / MEMORY_FILE).is_file():
                raise CheckpointError(f"{path / MEMORY_FILE} is missing: run.memory_length is on but the checkpoint "
                                      "has no memory")
            self.memory.load(read_tensors(path / MEMORY_FILE), d.device)
        resumed = TrainState(step=state["step"], epoch=state["epoch"], position=state["step_in_epoch"],
                             tokens_seen=state["tokens_seen"], words_seen=state.get("words_seen", 0),
                             elapsed_before=state["elapsed_s"],
                             last_eval=state.get("eval_loss"))
        rng = read_tensors(path / RNG_FILE)
        prefix = f"rank{d.rank}/"
        if state["world_size"] == d.world_size:
            mine = {k[len(prefix):]: v for k, v in rng.items() if k.startswith(prefix)}
            rng_from_tensors(mine, self.generator, d.device)
        else:
            self.log(f"WARNING: {path.name} was written by {state['world_size']} process(es), this run has "
                     f"{d.world_size}: data order, weights and optimizer resume exactly, but dropout and "
                     "masking draws start fresh streams")
        self.log(f"resumed from {path} at step {resumed.step} (epoch {resumed.epoch}, step {resumed.position} of "
                 "the epoch)")
        return resumed

    def _check_replicas(self, step: int) -> None:
        # DDP keeps replicas equal only if every gradient was all-reduced; check before saving rank 0's copy
        mine = torch.stack([p.detach().double().sum() for p in self.model.parameters()])
        copies = all_gather(self.d, mine)
        if any(not torch.equal(c, copies[0]) for c in copies[1:]):
            raise RuntimeError(f"step {step}: the processes' weights differ; gradients were not all synchronised")

    def save(self, state: TrainState, batches_per_epoch: int, eval_loss: float | None = None) -> Path:
        """Write a checkpoint of the current state (a collective: every process must call it)."""
        d = self.d
        if d.enabled:
            self._check_replicas(state.step)
        rng = rng_to_tensors(self.generator, d.device)
        gathered = {f"rank{r}/{key}": t for key, value in rng.items() for r, t in enumerate(all_gather(d, value))}
        path = self.run_dir / checkpoint_name(state.step)
        if d.is_main:
            epoch, position = state.epoch, state.position
            if position >= batches_per_epoch:
                epoch, position = epoch + 1, 0
            opt_tensors, groups = optimizer_to_tensors(self.optimizer)
            saved = {
                "step": state.step, "epoch": epoch, "step_in_epoch": position,
                "batches_per_epoch": batches_per_epoch, "tokens_seen": state.tokens_seen,
                "words_seen": state.words_seen,
                "elapsed_s": state.elapsed(), "eval_loss": eval_loss if eval_loss is not None else state.last_eval,
                "world_size": d.world_size, "schedule": schedule_state(state.step, self.config.optim),
                "optimizer_param_groups": groups, "torch_version": torch.__version__,
                "precision": self.precision.value,
                "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            tensors = {MODEL_FILE: self.model.state_dict(), OPTIMIZER_FILE: opt_tensors, RNG_FILE: gathered}
            if self.ema is not None:
                tensors[EMA_FILE] = self.ema.state_tensors()
            if self.memory is not None:
                tensors[MEMORY_FILE] = self.memory.to_tensors()
            try:
                write_checkpoint(self.run_dir, state.step, tensors, {
                    STATE_FILE: saved, CONFIG_FILE: self.config.to_dict(),
                    MODEL_CONFIG_FILE: self.model_config.to_dict(),
                })
            except WRITE_ERRORS as err:  # disk full, quota, file too large, I/O error: nothing of it is left
                failure = self._write_failed(path, err)
            else:
                failure = None
                for old in prune_checkpoints(self.run_dir, self.config.run.keep_last):
                    self.log(f"deleted old checkpoint {old.name}")
                self.log(f"saved checkpoint {path}")
        # every process learns whether rank 0 wrote it, so that all stop together rather than wait on rank 0
        if broadcast_int(d, int(d.is_main and failure is not None)):
            raise CheckpointWriteError(failure if d.is_main else f"process 0 could not write {path} (its error "
                                       "says why); the previous checkpoint is left as it was")
        return path

    def _write_failed(self, path: Path, err: Exception) -> str:
        """The one-line error for a checkpoint that could not be written."""
        previous = [p for _, p in list_checkpoints(self.run_dir) if p != path]
        kept = (f"the previous checkpoint {previous[-1]} is intact: free some space, then resume with --resume"
                if previous else "no earlier checkpoint exists")
        message = (f"cannot write checkpoint {path}: {write_error(err)}"
                   + f"; the partial write was removed and training stopped; {kept}")
        return message
