"""The training loop, the same for every family.

Each optimizer step takes the next global batch of the epoch's order (batches.py), cuts it into micro-batches
(grad_accum per process, one share per process under torchrun), turns each into the family's training inputs
with model.training_batch(ids, mask, generator), and back-propagates the *sum* of its token losses. Once all
micro-batches are in, the gradient is divided by the number of target tokens of the whole global batch (summed
over micro-batches and processes), so accumulation and DDP give the gradient of one big batch's mean token loss.

Exact resumption: weights, AdamW state, the step (the learning rate is a function of it), the data position
(epoch, step within the epoch; batches are a pure function of them) and every RNG of every process are in the
checkpoint, so a killed run resumed from its last checkpoint ends bitwise where an uninterrupted run ends."""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import Tensor

from ..attention.long import clamp_spans, span_penalty, span_summary, write_spans
from ..config import ModelConfig, from_dict
from ..data.dataset import TokenDataset
from ..families import MaskplayModel, build_model
from ..files import atomic_path, prepare_output_dir
from ..modeling import IGNORE_INDEX
from ..precision import Precision, forward_in
from ..precision_probe import AUTO
from ..precision_probe import resolve as resolve_precision
from ..tokenizer import Tokenizer, load_tokenizer
from . import checkpoint as ckpt
from . import distributed
from .batches import StepBatches, epoch_batches, eval_batches, pack_groups, packed_lengths, sequence_lengths
from .config import RESUMABLE_CHANGES, TrainConfig, config_differences, train_config_from_dict
from .distributed import Dist
from .metrics import Metrics
from .schedule import build_optimizer, learning_rate, schedule_state

FINAL_DIR = "final"
EXIT_SIGINT = 130  # the shell's code for a process ended by Ctrl-C


class TrainingDiverged(ValueError):
    """The loss or the gradient became nan or inf; the message says where and which checkpoint is the last good one
    (a ValueError, so the command line reports it in one line)."""


RESOLVED_CONFIG = "config.toml"


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    status: str  # "finished" (max_steps), "budget" (max_minutes), "interrupted" (SIGINT / SIGTERM)
    exit_code: int  # 0, or 130 after SIGINT
    final_dir: Path | None  # the save_pretrained export (not written when interrupted)
    checkpoint: Path | None  # the last checkpoint written
    eval_loss: float | None


def count_targets(model: MaskplayModel, batch: dict[str, Tensor]) -> int:
    """How many target tokens model(**batch).loss averages over (the rows of its logits), read from the labels
    so that the logits, which the loss never materialises, are not computed just to be counted."""
    counter = getattr(model, "num_targets", None)
    if callable(counter):  # a family that knows better says so
        return int(counter(batch))
    labels = batch["labels"]
    if model.family == "gpt":  # GPT shifts its labels inside forward: position 0 is never a target
        labels = labels[:, 1:]
    return int((labels != IGNORE_INDEX).sum())


class _Signals:
    """SIGINT / SIGTERM only set a flag; the loop checkpoints and stops after the current step. A second SIGINT
    interrupts at once (KeyboardInterrupt), for when the step itself hangs."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum

    def __exit__(self, *_: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _seed_everything(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def prepare_data(config: TrainConfig, run_dir: Path, d: Dist, log: Any) -> Path:
    """The prepared data directory: data.path, or RUN_DIR/data prepared from data.corpus (by rank 0)."""
    if config.data.path:
        path = Path(config.data.path)
        if not (path / "train").is_dir():
            raise FileNotFoundError(f"{path / 'train'} not found: --data must be a directory prepared by "
                                    "`maskplay prepare` (train/, valid/, tokenizer.json)")
        return path
    if not config.data.corpus:
        raise ValueError("no training data: set data.path (--data DIR) or data.corpus and data.tokenizer "
                         "(--corpus FILE... --tokenizer PATH)")
    out = run_dir / "data"
    if d.is_main and not (out / "train").is_dir():
        if not config.data.tokenizer:
            raise ValueError("data.corpus needs data.tokenizer (--tokenizer PATH) to prepare the corpus")
        try:
            from ..data.prepare import PrepareConfig, prepare_corpus
        except ModuleNotFoundError as err:
            raise ValueError("preparing a corpus needs maskplay.data.prepare, which this installation lacks; "
                             "prepare the data elsewhere and pass --data DIR") from err
        # the defaults of `maskplay prepare` (one sentence per sequence), at this run's length and seed
        prep = PrepareConfig(max_length=config.data.max_length, seed=config.data.seed,
                             workers=min(4, os.cpu_count() or 1), progress=True)
        log(f"preparing {len(config.data.corpus)} corpus path(s) into {out} (see docs/DATA.md)")
        summary = prepare_corpus(list(config.data.corpus), config.data.tokenizer, out, prep)
        log(f"prepared {summary.train_sequences:,} training sequences ({summary.train_tokens:,} tokens) and "
            f"{summary.valid_sequences:,} held-out ones in {summary.seconds:.0f} s")
    elif d.is_main:
        log(f"using the data prepared earlier in {out}")
    distributed.barrier(d)
    return out


class Trainer:
    def __init__(self, config: TrainConfig, d: Dist, resume: bool = False, resume_from: str | Path | None = None,
                 stream: TextIO | None = None) -> None:
        self.config = config
        self.d = d
        self.stream = stream if stream is not None else sys.stdout
        self.run_dir = Path(config.run.out_dir)
        self._pending: list[str] = []  # messages printed before the Metrics (and its log file) exist
        self.metrics: Metrics | None = None
        created = wrote_config = False
        if d.is_main:
            prepare_output_dir(self.run_dir, "run.out_dir (--out)")
            created = not self.run_dir.exists()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            ckpt.remove_partial_writes(self.run_dir)
        distributed.barrier(d)

        # Everything that can reject the config runs before metrics.jsonl and train.log are created, and a failed
        # start leaves nothing behind; the resolved config is written as soon as the config has passed the checks
        # that need no data, so that `--resume` works from any moment on (corpus preparation can take minutes).
        try:
            self.checkpoint_path = self._choose_checkpoint(resume, resume_from)
            self._check_batch_split()
            if d.is_main:
                wrote_config = not (self.run_dir / RESOLVED_CONFIG).exists()
                self._write_resolved_config()
            data_dir = prepare_data(config, self.run_dir, d, self.log)
            self.tokenizer: Tokenizer = load_tokenizer(data_dir)
            self.train_data = TokenDataset(data_dir / "train")
            self.valid_data = TokenDataset(data_dir / "valid") if (data_dir / "valid").is_dir() else None
            self.data_dir = data_dir
            self.model_config = config.model.build(self.tokenizer.model_config_ids())
            self._check_data()
        except (ValueError, FileNotFoundError):
            if d.is_main:
                self._undo_start(created, wrote_config)
            raise
        resume_step = None
        if self.checkpoint_path is not None:
            resume_step = int(ckpt.read_json(self.checkpoint_path / ckpt.STATE_FILE)["step"])
        if d.is_main:
            self.metrics = Metrics(self.run_dir, resume_step, config.run.tensorboard, stream=self.stream)
            for message in self._pending:
                self.metrics.log(message, echo=False)  # printed already; now into train.log
            self._pending.clear()

        cfg = config
        self.micro = cfg.data.batch_size // (cfg.optim.grad_accum * d.world_size)
        self.lengths = sequence_lengths(self.train_data)
        # what a batch indexes: the sequences, or with data.pack the packed rows of consecutive sequences
        self.packed = pack_groups(self.lengths, cfg.data.max_length) if cfg.data.pack else None
        self.item_lengths = (self.lengths if self.packed is None
                             else packed_lengths(self.lengths, self.packed, cfg.data.max_length))
        self.batches_per_epoch = len(self.item_lengths) // cfg.data.batch_size
        self.device = d.device
        self.precision = self._resolve_precision()

        _seed_everything(cfg.data.seed)  # the same initial weights on every process
        self.model: MaskplayModel = build_model(self.model_config).to(self.device)
        if cfg.model.init and self.checkpoint_path is None:
            self._initialise_from(cfg.model.init)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        # after the initial weights, each process gets its own streams (dropout, BERT's corruption)
        stream_seed = cfg.data.seed * 1_000_003 + d.rank + 1
        _seed_everything(stream_seed)
        self.generator = torch.Generator().manual_seed(stream_seed)

        self.step, self.epoch, self.position = 0, 0, 0
        self.tokens_seen, self.elapsed_before = 0, 0.0
        self.last_eval: float | None = None
        self.eval_parts: dict[str, float] = {}  # the family's loss parts at the last evaluation (ModelOutput.parts)
        if self.checkpoint_path is not None:
            self._load(self.checkpoint_path)
        self.ddp = None
        if d.enabled:
            from torch.nn.parallel import DistributedDataParallel

            self.ddp = DistributedDataParallel(self.model, device_ids=[self.device] if self.device.type == "cuda"
                                               else None)
        self.eval_set = self._eval_set()

    # ---- setup ----------------------------------------------------------------------------------------------

    def log(self, message: str) -> None:
        """A line for the console and train.log; warnings go to stderr, so that stdout keeps only results."""
        if not self.d.is_main:
            return
        stream = sys.stderr if message.startswith("WARNING") else self.stream
        if self.metrics is None:
            print(message, file=stream, flush=True)
            self._pending.append(message)
        else:
            self.metrics.log(message, stream=stream)

    def _write_resolved_config(self) -> None:
        with atomic_path(self.run_dir / RESOLVED_CONFIG) as tmp:
            tmp.write_text(self.config.to_toml())

    def _undo_start(self, created: bool, wrote_config: bool) -> None:
        """After a start that failed validation: remove the config.toml this start wrote and the run directory it
        created, unless something else is in them by now (a prepared corpus is kept)."""
        if wrote_config:
            (self.run_dir / RESOLVED_CONFIG).unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):
                self.run_dir.rmdir()  # only if empty

    def _check_batch_split(self) -> None:
        cfg, d = self.config, self.d
        per = cfg.optim.grad_accum * d.world_size
        if cfg.data.batch_size % per:
            raise ValueError(f"data.batch_size={cfg.data.batch_size} must be divisible by optim.grad_accum "
                             f"({cfg.optim.grad_accum}) x processes ({d.world_size}) = {per}")

    def _resolve_precision(self) -> Precision:
        """run.precision for this machine (auto: probed on rank 0, cached; every process uses rank 0's choice)."""
        cfg = self.config
        choice = None
        if self.d.is_main:
            choice = resolve_precision(cfg.run.precision, self.device, self.model_config,
                                       rows=self.micro * cfg.data.max_length, warn=self.log)
            if cfg.run.precision == AUTO:
                self.log(choice.describe())
        options = list(Precision)
        return options[distributed.broadcast_int(self.d, options.index(choice.precision) if choice else 0)]

    def _initialise_from(self, directory: str) -> None:
        """Copy the weights of a saved model (strict: every weight of this model must be there, nothing else)."""
        from ..model_dir import WEIGHTS_NAME, resolve_model_dir

        path = resolve_model_dir(directory) / WEIGHTS_NAME
        self.model.load_weights(path, source=f"model.init {path}")
        self.log(f"initialised the {self.model_config.family} model from {path}")

    def _choose_checkpoint(self, resume: bool, resume_from: str | Path | None) -> Path | None:
        """Rank 0 picks (and verifies) the checkpoint; every process loads the one it picked."""
        if resume_from is not None:
            path = Path(resume_from)
            if not path.is_dir():
                raise FileNotFoundError(f"checkpoint {path} not found")
            if self.d.is_main:
                ckpt.verify_checkpoint(path)  # an explicit choice gets no fallback
            distributed.barrier(self.d)
            return path
        existing = ckpt.list_checkpoints(self.run_dir)
        if not resume:
            if existing:
                raise ValueError(f"{self.run_dir} already has checkpoints (newest {existing[-1][1].name}); "
                                 "pass --resume to continue that run, or choose another --out")
            return None
        step = -1
        if self.d.is_main:
            try:
                path = ckpt.latest_valid_checkpoint(self.run_dir, warn=lambda m: self.log(f"WARNING: {m}"))
            except ckpt.CheckpointError:
                distributed.broadcast_int(self.d, -2)
                raise
            if path is None:
                self.log(f"--resume: {self.run_dir} has no checkpoint yet; starting from step 0")
            else:
                step = int(ckpt.read_json(path / ckpt.STATE_FILE)["step"])
        step = distributed.broadcast_int(self.d, step)
        if step == -2:
            raise ckpt.CheckpointError(f"rank 0 found no usable checkpoint in {self.run_dir}")
        return None if step < 0 else self.run_dir / ckpt.checkpoint_name(step)

    def _check_data(self) -> None:
        cfg, mc = self.config, self.model_config
        if cfg.data.max_length > mc.max_position:
            raise ValueError(f"data.max_length={cfg.data.max_length} exceeds the model's max_position="
                             f"{mc.max_position} (set model.max_position or data.max_length)")
        meta_vocab = self.train_data.meta.get("vocab_size")
        if meta_vocab is not None and meta_vocab > mc.vocab_size:
            raise ValueError(f"{self.train_data.directory}/meta.json says vocab_size={meta_vocab}, more than the "
                             f"{mc.vocab_size} of the tokenizer in {self.data_dir}")
        if len(self.train_data) < cfg.data.batch_size:
            raise ValueError(f"{self.train_data.directory} has {len(self.train_data)} sequences, fewer than one "
                             f"batch of data.batch_size={cfg.data.batch_size}")

    def _eval_set(self) -> list[tuple[int, tuple[Tensor, Tensor]]]:
        """This process's share of the fixed held-out batches, with their global index (which seeds BERT's
        corruption, so every evaluation scores the very same targets)."""
        cfg = self.config
        if self.valid_data is None or cfg.run.eval_batches == 0:
            self.log("held-out evaluation is off (" + ("no valid/ split in the data)" if self.valid_data is None
                                                       else "run.eval_batches = 0)"))
            return []
        batches = eval_batches(self.valid_data, cfg.run.eval_batches * cfg.data.batch_size, self.micro,
                               cfg.data.max_length, self.tokenizer.special.pad)
        return [(j, b) for j, b in enumerate(batches) if j % self.d.world_size == self.d.rank]

    # ---- checkpoints ----------------------------------------------------------------------------------------

    def _load(self, path: Path) -> None:
        cfg = self.config
        saved = train_config_from_dict(ckpt.read_json(path / ckpt.CONFIG_FILE), source=str(path / ckpt.CONFIG_FILE))
        changed = config_differences(saved, cfg)
        state = ckpt.read_json(path / ckpt.STATE_FILE)
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
                             f"{path / ckpt.CONFIG_FILE}: {fixed}. Resume with the same config (it is saved in "
                             "the run directory) or start a new run")
        if changed:
            self.log(f"resuming with changed settings: {changed}")
        if "optim.max_steps" in changed:
            self.log("WARNING: optim.max_steps changed, so the learning-rate decay changes from here on")
        saved_model = from_dict(ModelConfig, ckpt.read_json(path / ckpt.MODEL_CONFIG_FILE),
                                source=str(path / ckpt.MODEL_CONFIG_FILE))
        if saved_model != self.model_config:
            raise ValueError(f"cannot resume from {path}: its model config differs from the one built now "
                             f"(the tokenizer of {self.data_dir} differs?)")
        self.model.load_strict({k: v.to(self.device) for k, v in ckpt.read_tensors(path / ckpt.MODEL_FILE).items()},
                               source=str(path / ckpt.MODEL_FILE))
        ckpt.optimizer_from_tensors(self.optimizer, ckpt.read_tensors(path / ckpt.OPTIMIZER_FILE),
                                    state["optimizer_param_groups"], source=str(path / ckpt.OPTIMIZER_FILE))
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["step_in_epoch"]
        self.tokens_seen, self.elapsed_before = state["tokens_seen"], state["elapsed_s"]
        self.last_eval = state.get("eval_loss")
        rng = ckpt.read_tensors(path / ckpt.RNG_FILE)
        prefix = f"rank{self.d.rank}/"
        if state["world_size"] == self.d.world_size:
            mine = {k[len(prefix):]: v for k, v in rng.items() if k.startswith(prefix)}
            ckpt.rng_from_tensors(mine, self.generator, self.device)
        else:
            self.log(f"WARNING: {path.name} was written by {state['world_size']} process(es), this run has "
                     f"{self.d.world_size}: data order, weights and optimizer resume exactly, but dropout and "
                     "masking draws start fresh streams")
        self.log(f"resumed from {path} at step {self.step} (epoch {self.epoch}, step {self.position} of the epoch)")

    def save(self, eval_loss: float | None = None) -> Path:
        """Write a checkpoint of the current state (a collective: every process must call it)."""
        d = self.d
        if d.enabled:
            # DDP keeps replicas equal only if every gradient was all-reduced; check before saving rank 0's copy
            mine = torch.stack([p.detach().double().sum() for p in self.model.parameters()])
            copies = distributed.all_gather(d, mine)
            if any(not torch.equal(c, copies[0]) for c in copies[1:]):
                raise RuntimeError(f"step {self.step}: the processes' weights differ; gradients were not all "
                                   "synchronised")
        rng = ckpt.rng_to_tensors(self.generator, self.device)
        gathered = {f"rank{r}/{key}": t for key, value in rng.items()
                    for r, t in enumerate(distributed.all_gather(d, value))}
        path = self.run_dir / ckpt.checkpoint_name(self.step)
        if d.is_main:
            epoch, position = self.epoch, self.position
            if position >= self.batches_per_epoch:
                epoch, position = epoch + 1, 0
            opt_tensors, groups = ckpt.optimizer_to_tensors(self.optimizer)
            state = {
                "step": self.step, "epoch": epoch, "step_in_epoch": position,
                "batches_per_epoch": self.batches_per_epoch, "tokens_seen": self.tokens_seen,
                "elapsed_s": self.elapsed(), "eval_loss": eval_loss if eval_loss is not None else self.last_eval,
                "world_size": d.world_size, "schedule": schedule_state(self.step, self.config.optim),
                "optimizer_param_groups": groups, "torch_version": torch.__version__,
                "precision": self.precision.value,
                "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            ckpt.write_checkpoint(self.run_dir, self.step, {
                ckpt.MODEL_FILE: self.model.state_dict(), ckpt.OPTIMIZER_FILE: opt_tensors, ckpt.RNG_FILE: gathered,
            }, {
                ckpt.STATE_FILE: state, ckpt.CONFIG_FILE: self.config.to_dict(),
                ckpt.MODEL_CONFIG_FILE: self.model_config.to_dict(),
            })
            for old in ckpt.prune_checkpoints(self.run_dir, self.config.run.keep_last):
                self.log(f"deleted old checkpoint {old.name}")
            self.log(f"saved checkpoint {path}")
        distributed.barrier(d)
        return path

    def export_final(self) -> Path:
        """RUN_DIR/final: config.json + model.safetensors (MaskplayModel.from_pretrained) + tokenizer.json."""
        final = self.run_dir / FINAL_DIR
        if self.d.is_main:
            tmp = self.run_dir / f".tmp-{FINAL_DIR}-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            self.model.save_pretrained(tmp)
            self.tokenizer.save(tmp)
            (tmp / "train_config.json").write_text(self.config.to_json())
            old = self.run_dir / f".old-{FINAL_DIR}-{os.getpid()}"
            if final.exists():
                os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
            if self.model_config.long.adaptive_span:  # the learned spans, layers x heads, next to the final model
                spans = write_spans(self.model, self.run_dir / "adaptive_spans.json")
                self.log(f"learned adaptive spans (tokens, layer by layer): {spans}; {self.run_dir / 'adaptive_spans.json'}")
        distributed.barrier(self.d)
        return final

    # ---- the loop -------------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self._t0 if hasattr(self, "_t0") else 0.0)

    def _steps(self) -> Iterator[list[tuple[Tensor, Tensor]]]:
        """This process's micro-batches of every remaining step, epoch after epoch, from the saved position."""
        cfg, d = self.config, self.d
        while True:
            if self.position >= self.batches_per_epoch:
                self.epoch, self.position = self.epoch + 1, 0
            order = epoch_batches(self.item_lengths, cfg.data.batch_size, cfg.data.seed, self.epoch,
                                  cfg.data.bucket_window, cfg.data.curriculum_steps)
            steps = StepBatches(self.train_data.directory, order, d.rank, d.world_size, cfg.optim.grad_accum,
                                cfg.data.max_length, self.tokenizer.special.pad, self.packed)
            remaining = range(self.position, len(steps))
            if cfg.data.num_workers:
                # its own generator: a DataLoader otherwise draws its workers' seed from the global RNG, which
                # would shift the dropout stream
                loader = torch.utils.data.DataLoader(steps, batch_size=None, sampler=remaining,
                                                     num_workers=cfg.data.num_workers,
                                                     generator=torch.Generator().manual_seed(self.epoch))
                yield from loader
            else:
                for k in remaining:
                    yield steps[k]

    def _micro_step(self, ids: Tensor, mask: Tensor, sync: bool) -> tuple[float, int, dict[str, float]]:
        """Forward and backward one micro-batch's summed token loss; returns (loss sum, target count, the
        family's loss parts (ModelOutput.parts) times the target count)."""
        batch = self.model.training_batch(ids, mask, generator=self.generator)  # on the CPU: device-independent
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        module = self.ddp if self.ddp is not None else self.model
        no_sync = self.ddp.no_sync() if self.ddp is not None and not sync else contextlib.nullcontext()
        n = count_targets(self.model, batch)
        if n == 0:
            # nothing to learn from (only special tokens); skipping is exact, except where DDP expects this
            # process's backward to start the gradient all-reduce
            if self.ddp is not None and sync:
                raise ValueError(f"step {self.step}: the last micro-batch of process {self.d.rank} has no target "
                                 "tokens (its sequences hold only special tokens); drop such sequences from the "
                                 "data")
            return 0.0, 0, {}
        with no_sync:
            out = forward_in(module, self.precision, **batch)
            total = out.loss.float() * n  # the family's loss is the mean over its n targets: n * mean is their sum
            if self.model_config.long.adaptive_span:  # + adaptive span's L1 term (long_attention.py)
                (total + span_penalty(self.model) * n).backward()
            else:
                total.backward()
        return float(total.detach()), n, {k: float(v.detach()) * n for k, v in (out.parts or {}).items()}

    def evaluate(self) -> float | None:
        """Mean token loss over the fixed held-out batches (all processes' shares together)."""
        if not self.eval_set:
            totals = distributed.all_reduce_sum(self.d, torch.zeros(2, dtype=torch.float64))
            return None if totals[1] == 0 else float(totals[0] / totals[1])
        self.model.eval()
        loss_sum, count = 0.0, 0
        parts: dict[str, float] = {}
        with torch.no_grad():
            for j, (ids, mask) in self.eval_set:
                g = torch.Generator().manual_seed(self.config.data.seed * 7919 + j)
                batch = {k: v.to(self.device) for k, v in self.model.training_batch(ids, mask, generator=g).items()}
                n = count_targets(self.model, batch)
                if n:
                    out = forward_in(self.model, self.precision, **batch)
                    loss_sum += float(out.loss.float()) * n
                    count += n
                    for key, value in (out.parts or {}).items():
                        parts[key] = parts.get(key, 0.0) + float(value.detach()) * n
        self.model.train()
        # the loss parts are this process's (rank 0 reports them); the loss itself is summed over all
        self.eval_parts = {f"eval_{k}": v / count for k, v in parts.items()} if count else {}
        totals = distributed.all_reduce_sum(self.d, torch.tensor([loss_sum, count], dtype=torch.float64))
        return None if totals[1] == 0 else float(totals[0] / totals[1])

    def run(self) -> TrainResult:
        cfg, d = self.config, self.d
        if d.is_main:
            self.model_config.to_json(self.run_dir / "model_config.json")
            self.tokenizer.save(self.run_dir)
            n_long = int((self.lengths > cfg.data.max_length).sum())
            if n_long:
                self.log(f"WARNING: {n_long} of {len(self.lengths)} training sequences are longer than "
                         f"data.max_length={cfg.data.max_length} and are truncated")
            self.log(f"{self.model_config.family} model, {self.model.num_parameters():,} parameters, "
                     f"vocabulary {self.model_config.vocab_size}; {len(self.train_data):,} training sequences "
                     f"({self.train_data.num_tokens:,} tokens)"
                     + (f" packed into {len(self.item_lengths):,} rows of at most {cfg.data.max_length} pieces "
                        f"(mean {self.item_lengths.mean():.1f})" if self.packed is not None else "")
                     + f", {self.batches_per_epoch} steps per epoch; "
                     f"{d.world_size} process(es) x {cfg.optim.grad_accum} micro-batch(es) of {self.micro}; "
                     f"device {self.device}, {self.precision.value}; run directory {self.run_dir}")
        self.model.train()
        if self.step == 0:
            self.last_eval = self.evaluate()
            if self.metrics and self.last_eval is not None:
                self.metrics.record(step=0, eval_loss=self.last_eval, elapsed_s=0.0, **self.eval_parts)
                self.log(f"step 0: held-out loss {self.last_eval:.4f}")
        budget = cfg.run.max_minutes * 60 if cfg.run.max_minutes is not None else math.inf
        status = "finished" if self.step >= cfg.optim.max_steps else ""
        if not status and cfg.run.stop_at_step is not None and self.step >= cfg.run.stop_at_step:
            status = "budget"  # a resumed run already at its stop: export only
        saved_at = self.step if self.checkpoint_path is not None else -1
        evaluated_at = self.step
        last_path = self.checkpoint_path
        window = {"loss": 0.0, "n": 0.0, "tokens": 0.0, "time": time.monotonic()}
        window_parts: dict[str, float] = {}  # this process's loss parts (ModelOutput.parts) x targets
        bar = None
        if d.is_main and cfg.run.progress:  # a bar on a terminal, plain lines every 30 s otherwise (maskplay.progress)
            from ..progress import Progress

            bar = Progress(total=cfg.optim.max_steps, initial=self.step, unit="step", desc=self.model_config.family)
        self._t0 = time.monotonic()
        with _Signals() as signals:
            batches = self._steps()
            while not status:
                lr = learning_rate(self.step, cfg.optim)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                micro_batches = next(batches)
                loss_sum, n_targets, n_tokens = 0.0, 0, 0
                for m, (ids, mask) in enumerate(micro_batches):
                    part, n, parts = self._micro_step(ids, mask, sync=m == len(micro_batches) - 1)
                    loss_sum += part
                    n_targets += n
                    window["local_n"] = window.get("local_n", 0.0) + n
                    for key, value in parts.items():
                        window_parts[key] = window_parts.get(key, 0.0) + value
                    n_tokens += int(mask.sum())
                # whether to stop after this step is decided here, together, so every process stops at the same one
                flags = [float(signals.received is not None), float(self.elapsed() >= budget)]
                totals = distributed.all_reduce_sum(
                    d, torch.tensor([loss_sum, n_targets, n_tokens, *flags], dtype=torch.float64)).tolist()
                g_loss, g_targets, g_tokens, g_signal, g_budget = totals
                if g_targets == 0:
                    raise ValueError(f"step {self.step}: the global batch has no target tokens")
                if not math.isfinite(g_loss):
                    self._diverged(f"the training loss is {g_loss}", last_path, bar)
                # DDP averaged the per-process sums over world_size processes; undo that and divide by the count
                scale = d.world_size / g_targets
                for p in self.model.parameters():
                    if p.grad is not None:
                        p.grad.mul_(scale)
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                           cfg.optim.clip if cfg.optim.clip > 0 else math.inf)
                if not math.isfinite(float(grad_norm)):  # a finite loss whose gradient overflowed
                    self._diverged(f"the gradient norm is {float(grad_norm)}", last_path, bar)
                self.optimizer.step()
                if self.model_config.long.adaptive_span:
                    clamp_spans(self.model)  # spans back into [0, max_span]
                self.optimizer.zero_grad(set_to_none=True)
                self.step += 1
                self.position += 1
                self.tokens_seen += int(g_tokens)
                window["loss"] += g_loss
                window["n"] += g_targets
                window["tokens"] += g_tokens
                if bar is not None:
                    bar.update(1)

                if self.step >= cfg.optim.max_steps:
                    status = "finished"
                elif g_signal:
                    status = "interrupted"
                elif g_budget or (cfg.run.stop_at_step is not None and self.step >= cfg.run.stop_at_step):
                    status = "budget"

                if self.step % cfg.run.log_every == 0 or status:
                    now = time.monotonic()
                    loss = window["loss"] / window["n"]
                    rate = window["tokens"] / max(now - window["time"], 1e-9)
                    if self.metrics:
                        self.metrics.record(step=self.step, loss=loss, lr=lr, grad_norm=float(grad_norm),
                                            tokens_per_s=rate, elapsed_s=self.elapsed(), epoch=self.epoch,
                                            tokens=self.tokens_seen, **span_summary(self.model),
                                            **{k: v / max(window.get("local_n", 0.0), 1.0)
                                               for k, v in window_parts.items()})
                    if bar is not None:
                        extra = {"budget_left": f"{max(0.0, budget - self.elapsed()) / 60:.1f}min"} \
                            if math.isfinite(budget) else {}
                        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}", lr=f"{lr:.2e}", **extra)
                    window = {"loss": 0.0, "n": 0.0, "tokens": 0.0, "time": now}
                    window_parts = {}
                paused = time.monotonic()
                if cfg.run.eval_every and self.step % cfg.run.eval_every == 0 and status != "interrupted":
                    self._eval_and_report()
                    evaluated_at = self.step
                if cfg.run.save_every and self.step % cfg.run.save_every == 0:
                    last_path = self.save()
                    saved_at = self.step
                window["time"] += time.monotonic() - paused  # tokens/s counts training time only
            if bar is not None:
                bar.close()
            if status != "interrupted" and evaluated_at != self.step:
                self._eval_and_report()
            if saved_at != self.step:
                last_path = self.save()
        exit_code = 0
        final = None
        if status == "interrupted":
            name = signal.Signals(signals.received).name if signals.received else "a signal on another process"
            exit_code = EXIT_SIGINT if signals.received == signal.SIGINT else 0
            self.log(f"stopped by {name} at step {self.step}; resume with --resume (checkpoint {last_path})")
        else:
            final = self.export_final()
            why = ("reached optim.max_steps" if status == "finished"
                   else f"reached run.stop_at_step={cfg.run.stop_at_step}" if self.step == cfg.run.stop_at_step
                   else f"used the run.max_minutes={cfg.run.max_minutes} budget")
            self.log(f"{why} at step {self.step}; held-out loss {self.last_eval}; final model: {final} "
                     "(MaskplayModel.from_pretrained)")
        if self.metrics:
            self.metrics.plot()
        return TrainResult(run_dir=self.run_dir, step=self.step, status=status, exit_code=exit_code, final_dir=final,
                           checkpoint=last_path, eval_loss=self.last_eval)

    def _diverged(self, what: str, last_path: Path | None, bar: Any) -> None:
        """Stop before a non-finite value reaches the weights: the optimizer has not stepped, no checkpoint is
        written, and the newest checkpoint on disk is the last good state. Every process sees the same all-reduced
        values, so all stop at the same step."""
        if bar is not None:
            bar.close()
        where = f"the last good checkpoint is {last_path}" if last_path is not None else "no checkpoint was written yet"
        message = (f"step {self.step + 1}: {what}; training stopped before the update, {where}. Start a new run "
                   "with a lower optim.lr or run.precision=fp32 (a resumed run repeats this step exactly)")
        if self.metrics:  # into train.log; the console gets it once, as the command's one-line error
            self.metrics.log(f"ERROR: {message}", echo=False)
            self.metrics.plot()
        raise TrainingDiverged(message)

    def _eval_and_report(self) -> None:
        loss = self.evaluate()
        if loss is None:
            return
        self.last_eval = loss
        if self.metrics:
            self.metrics.record(step=self.step, eval_loss=loss, elapsed_s=self.elapsed(), **self.eval_parts)
            self.metrics.plot()
            self.log(f"step {self.step}: held-out loss {loss:.4f}")


def train(config: TrainConfig, resume: bool = False, resume_from: str | Path | None = None,
          stream: TextIO | None = None) -> TrainResult:
    """Train (or resume) one run as `config` describes; under torchrun, one call per process."""
    config.validate()
    if config.run.threads is not None:
        torch.set_num_threads(config.run.threads)
    if config.run.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it to be deterministic
        torch.use_deterministic_algorithms(True, warn_only=True)
    d = distributed.setup(config.run.device)
    trainer = None
    completed = False
    try:
        trainer = Trainer(config, d, resume=resume, resume_from=resume_from, stream=stream)
        result = trainer.run()
        completed = True
        return result
    finally:
        if trainer is not None and trainer.metrics is not None:
            trainer.metrics.close()
        # DDP's reducer holds the process group; were it still alive when the group is destroyed, gloo's worker
        # threads would be torn down at interpreter exit, which aborts a process now and then
        del trainer
        gc.collect()
        distributed.teardown(d, synchronize=completed)


def saved_run_config(run_dir: str | Path) -> TrainConfig | None:
    """The resolved config a run saved (RUN_DIR/config.toml), for resuming without repeating it."""
    path = Path(run_dir) / RESOLVED_CONFIG
    if not path.is_file():
        return None
    from .config import load_train_config

    return load_train_config(path)


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
