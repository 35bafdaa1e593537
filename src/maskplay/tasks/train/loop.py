"""The training loop, the same for every family.

Each optimizer step takes the next global batch of the epoch's order (batches.py), cuts it into micro-batches
(grad_accum per process, one share per process under torchrun), turns each into the family's training inputs
with model.training_batch(ids, mask, generator), and back-propagates the *sum* of its token losses. Once all
micro-batches are in, the gradient is divided by the number of target tokens of the whole global batch (summed
over micro-batches and processes), so accumulation and DDP give the gradient of one big batch's mean token loss.

Exact resumption: weights, AdamW state, the step (the learning rate is a function of it), the data position
(epoch, step within the epoch; batches are a pure function of them) and every RNG of every process are in the
checkpoint, so a killed run resumed from its last checkpoint ends bitwise where an uninterrupted run ends.

This module tells the story of a run (Trainer.run); the units it calls are stepping.py (forward, backward,
accumulation, the optimizer step), evaluation.py (the held-out loss), run_checkpoints.py (resume and save) and
export.py (the final model)."""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn, TextIO

import torch
from torch import Tensor

from ...data.dataset import TokenDataset
from ...data.tokenizer import Tokenizer, load_tokenizer
from ...families import MaskplayModel, build_model
from ...nn.attention import flex
from ...nn.attention.long_attention import span_summary
from ...runtime.files import prepare_output_dir
from ...runtime.precision import forward_in
from .batches import StepFeed, pack_groups, packed_lengths, sequence_lengths, step_stream
from .budget import end_notes
from .checkpoint_files import remove_partial_writes
from .config import TrainConfig
from .data_schedule import DataSchedule, batch_size_at, length_at, scheduled
from .distributed import Dist, PeerLost, barrier, lost_peer_message, peer_failure, teardown
from .distributed import setup as setup_processes
from .ema import WeightEma
from .evaluation import Evaluator
from .export import FINAL_DIR, export_at_words, export_final
from .metrics import Metrics, RunLog, Window
from .run_checkpoints import Checkpointer, CheckpointWriteError, checkpoint_step, choose_checkpoint
from .schedule import build_optimizer
from .signals import EXIT_SIGINT, StopSignals
from .startup import (
    RESOLVED_CONFIG,
    check_batch_split,
    check_data,
    hold_run_directory,
    initialise_from,
    run_precision,
    seed_everything,
    undo_start,
    write_resolved_config,
)
from .state import TrainState
from .stepping import NonFinite, StepOutcome, Stepper
from .stream import SegmentMemory, stream_of, stream_steps
from .word_budget import check_word_counts, marks_crossed, plan_line, words_reached

__all__ = ["TrainResult", "TrainingDiverged", "Trainer", "train", "saved_run_config", "prepare_data", "forward_in",
           "count_targets", "read_metrics", "FINAL_DIR", "EXIT_SIGINT", "RESOLVED_CONFIG"]


class TrainingDiverged(ValueError):
    """The loss or the gradient became nan or inf; the message says where and which checkpoint is the last good one
    (a ValueError, so the command line reports it in one line)."""


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
    so that the logits, which the loss never materialises, are not computed just to be counted: the family's
    rule (families/base.py: the labelled tokens; GPT's shift; ELECTRA's every real token)."""
    return int(model.num_targets(batch))


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
            from ...data.prepare import PrepareConfig, prepare_corpus
        except ModuleNotFoundError as err:
            raise ValueError("preparing a corpus needs maskplay.data.prepare, which this installation lacks; "
                             "prepare the data elsewhere and pass --data DIR") from err
        # the defaults of `maskplay prepare` (one sentence per sequence), at this run's length and seed
        prep = PrepareConfig(max_length=config.data.max_length, seed=config.data.seed,
                             workers=min(4, os.cpu_count() or 1), progress=True)
        log(f"preparing {len(config.data.corpus)} corpus path(s) into {out} (see docs/guides/data.md)")
        summary = prepare_corpus(list(config.data.corpus), config.data.tokenizer, out, prep)
        log(f"prepared {summary.train_sequences:,} training sequences ({summary.train_tokens:,} tokens) and "
            f"{summary.valid_sequences:,} held-out ones in {summary.seconds:.0f} s")
    elif d.is_main:
        log(f"using the data prepared earlier in {out}")
    barrier(d, timeout_s=PREPARE_WAIT_S)
    return out


# how long the other processes wait for rank 0 to prepare a corpus (a dead rank 0 is noticed at once)
PREPARE_WAIT_S = 24 * 3600.0


def status_at_start(cfg: TrainConfig, step: int, words_seen: int = 0) -> str:
    if step >= cfg.optim.max_steps:
        return "finished"
    if (cfg.run.stop_at_step is not None and step >= cfg.run.stop_at_step) or words_reached(cfg, words_seen):
        return "budget"  # a resumed run already at its stop: export only
    return ""


def status_after(cfg: TrainConfig, step: int, outcome: StepOutcome, words_seen: int = 0) -> str:
    """Whether to stop after this step, decided from all-reduced values, so every process stops at the same one."""
    if step >= cfg.optim.max_steps:
        return "finished"
    if outcome.signal:
        return "interrupted"
    if (outcome.budget or (cfg.run.stop_at_step is not None and step >= cfg.run.stop_at_step)
            or words_reached(cfg, words_seen)):
        return "budget"
    return ""


def stop_reason(cfg: TrainConfig, status: str, step: int, words_seen: int) -> str:
    if words_reached(cfg, words_seen):  # first: a words budget usually ends at the optim.max_steps planned for it
        return f"reached run.max_words={cfg.run.max_words:,} ({words_seen:,} words seen)"
    if status == "finished":
        return "reached optim.max_steps"
    if step == cfg.run.stop_at_step:
        return f"reached run.stop_at_step={cfg.run.stop_at_step}"
    return f"used the run.max_minutes={cfg.run.max_minutes} budget"


def diverged_message(err: NonFinite, step: int, last_path: Path | None) -> str:
    """The one-line error of a run stopped by a nan or inf at step index err.step, found at step index `step`."""
    where = f"the last good checkpoint is {last_path}" if last_path is not None else "no checkpoint was written yet"
    stopped = ("before the update" if err.step == step else
               f"at step {step}, where it was read (run.check_every_step = false), before anything after it was saved")
    return (f"step {err.step + 1}: {err}; training stopped {stopped}, {where}. Start a new run with a lower optim.lr "
            "or run.precision=fp32 (a resumed run repeats this step exactly)")


class Trainer:
    """One run: __init__ prepares it (checks, data, model, resumption), run() trains it."""

    def __init__(self, config: TrainConfig, d: Dist, resume: bool = False, resume_from: str | Path | None = None,
                 stream: TextIO | None = None) -> None:
        self.config, self.d = config, d
        self.run_dir = Path(config.run.out_dir)
        self.log = RunLog(d.is_main, stream)
        self.metrics: Metrics | None = None
        self.checkpoint_path = self._start(resume, resume_from)
        resume_step = None if self.checkpoint_path is None else checkpoint_step(self.checkpoint_path)
        if d.is_main:
            self.metrics = Metrics(self.run_dir, resume_step, config.run.tensorboard, stream=self.log.stream)
            self.log.attach(self.metrics)
        self._lay_out_data()
        self.device = d.device
        self.precision = run_precision(config, d, self.model_config, self.micro, self.log)
        self._build_model()
        self.memory = SegmentMemory(config.run.memory_length) if config.run.memory_length else None
        self.checkpointer = Checkpointer(config, d, self.run_dir, self.model, self.model_config, self.optimizer,
                                         self.generator, self.precision, self.log, ema=self.ema, memory=self.memory)
        self.state = TrainState()
        if self.checkpoint_path is not None:
            self.state = self.checkpointer.load(self.checkpoint_path, self.data_dir)
        # looked up here, in this module, so that a patched loop.forward_in / loop.count_targets is what runs
        self.stepper = Stepper(config, d, self.model, self.model_config, self.optimizer, self.generator,
                               self.precision, forward=forward_in, count_targets=count_targets, ema=self.ema,
                               memory=self.memory)
        self.evaluator = Evaluator(config, d, self.model, self.precision, self.valid_data, self.micro,
                                   self.tokenizer.special.pad, self.log, forward=forward_in, count_targets=count_targets)
        self.last_path: Path | None = self.checkpoint_path
        self.bar: Any = None
        self.losses: list[float] = []  # the first and the last training loss logged (budget.end_notes)

    # ---- preparing ------------------------------------------------------------------------------------------

    def _start(self, resume: bool, resume_from: str | Path | None) -> Path | None:
        """The checks, the resolved config and the data; returns the checkpoint to resume from."""
        config, d = self.config, self.d
        created = wrote_config = False
        if d.is_main:
            prepare_output_dir(self.run_dir, "run.out_dir (--out)")
            created = not self.run_dir.exists()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            remove_partial_writes(self.run_dir)
        barrier(d)
        # Everything that can reject the config runs before metrics.jsonl and train.log are created, and a failed
        # start leaves nothing behind; the resolved config is written as soon as the config has passed the checks
        # that need no data, so that `--resume` works from any moment on (corpus preparation can take minutes).
        try:
            path = choose_checkpoint(self.run_dir, d, resume, resume_from, self.log)
            check_batch_split(config, d)
            if d.is_main:
                wrote_config = not (self.run_dir / RESOLVED_CONFIG).exists()
                write_resolved_config(self.run_dir, config)
            data_dir = prepare_data(config, self.run_dir, d, self.log)
            self.tokenizer: Tokenizer = load_tokenizer(data_dir)
            self.train_data = TokenDataset(data_dir / "train")
            self.valid_data = TokenDataset(data_dir / "valid") if (data_dir / "valid").is_dir() else None
            self.data_dir = data_dir
            self.model_config = config.model.build(self.tokenizer.model_config_ids())
            check_data(config, self.model_config, self.train_data, data_dir)
            check_word_counts(config, self.train_data)
        except (ValueError, FileNotFoundError):
            if d.is_main:
                undo_start(self.run_dir, created, wrote_config)
            raise
        return path

    def _lay_out_data(self) -> None:
        cfg = self.config
        self.micro = cfg.data.batch_size // (cfg.optim.grad_accum * self.d.world_size)
        self.lengths = sequence_lengths(self.train_data)
        # what a batch indexes: the sequences, or with data.pack the packed rows of consecutive sequences
        self.packed = pack_groups(self.lengths, cfg.data.max_length) if cfg.data.pack else None
        self.item_lengths = (self.lengths if self.packed is None
                             else packed_lengths(self.lengths, self.packed, cfg.data.max_length))
        self.stream = stream_of(cfg, self.d, self.train_data.directory)  # data.stream: lanes of text (stream.py)
        self.batches_per_epoch = (len(self.stream) if self.stream is not None
                                  else len(self.item_lengths) // cfg.data.batch_size)
        # GPT-BERT's batch-size ramp and sequence-length schedule (data_schedule.py), else fixed batches
        self.data_schedule = DataSchedule(cfg, self.lengths) if scheduled(cfg) else None
        if self.data_schedule is not None:
            self.data_schedule.check(self.d)

    def _build_model(self) -> None:
        cfg = self.config
        seed_everything(cfg.data.seed)  # the same initial weights on every process
        self.model: MaskplayModel = build_model(self.model_config).to(self.device)
        if cfg.model.init and self.checkpoint_path is None:
            initialise_from(self.model, self.model_config, cfg.model.init, self.log)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.ema = WeightEma(self.model, cfg.optim.ema, cfg.optim.ema_debias) if cfg.optim.ema else None
        # after the initial weights, each process gets its own streams (dropout, BERT's corruption)
        stream_seed = cfg.data.seed * 1_000_003 + self.d.rank + 1
        seed_everything(stream_seed)
        self.generator = torch.Generator().manual_seed(stream_seed)

    # ---- the run --------------------------------------------------------------------------------------------

    def run(self) -> TrainResult:
        cfg, st = self.config, self.state
        announce(self)
        self.model.train()
        if st.step == 0:
            st.last_eval = self.evaluator.report(0, 0.0, self.metrics, self.log)
        budget = cfg.run.max_minutes * 60 if cfg.run.max_minutes is not None else math.inf
        status = status_at_start(self.config, self.state.step, self.state.words_seen)
        saved_at = st.step if self.checkpoint_path is not None else -1
        evaluated_at = st.step
        window = Window()
        self.bar = self._progress_bar()
        st.start_clock()
        with StopSignals() as signals:
            try:
                batches = (step_stream(st, cfg, self.d, self.train_data.directory, self.item_lengths,
                                       self.tokenizer.special.pad, self.packed) if self.data_schedule is None
                           else self.data_schedule.stream(st, self.d, self.train_data.directory,
                                                          self.tokenizer.special.pad))
                if self.stream is not None:
                    batches = stream_steps(st, cfg, self.d, self.train_data.directory, self.stream)
                feed = StepFeed(st, batches)
                while not status:
                    words_before = st.words_seen
                    outcome = self._step(feed, signals, budget, window)
                    status = status_after(self.config, self.state.step, outcome, st.words_seen)
                    marks = marks_crossed(cfg, words_before, st.words_seen)
                    if status or marks or any(every and st.step % every == 0 for every in (
                            cfg.run.log_every, cfg.run.eval_every, cfg.run.save_every)):
                        outcome = self._settled(outcome, window)  # read before anything is logged or saved
                    for mark in marks:  # a loadable model at N words
                        export_at_words(self.run_dir, self.d, self.model, self.tokenizer, cfg, mark, st.progress(),
                                        self.log, ema=self.ema)
                    if st.step % cfg.run.log_every == 0 or status:
                        self._log_step(outcome, window, budget)
                    paused = time.monotonic()
                    if cfg.run.eval_every and st.step % cfg.run.eval_every == 0 and status != "interrupted":
                        self._eval_and_report()
                        evaluated_at = st.step
                    if cfg.run.save_every and st.step % cfg.run.save_every == 0:
                        self.last_path, saved_at = self.save(), st.step
                    window.pause(paused)  # tokens/s counts training time only
                if self.bar is not None:
                    self.bar.close()
                if status != "interrupted" and evaluated_at != st.step:
                    self._eval_and_report()
                if saved_at != st.step:
                    self.last_path = self.save()
            except CheckpointWriteError as err:
                self._log_error(str(err))
                raise
            except Exception as err:  # noqa: BLE001 - only a peer's failure is handled here
                if not peer_failure(self.d, err):
                    raise
                signals.ignore_sigterm()  # torchrun's agent now sends SIGTERM: the line must still get out
                self._lost_peer(err)
        return self._finish(status, signals)

    def _progress_bar(self) -> Any:
        if not (self.d.is_main and self.config.run.progress):
            return None
        # a bar on a terminal, plain lines every 30 s otherwise (maskplay.runtime.progress)
        from ...runtime.progress import Progress

        return Progress(total=self.config.optim.max_steps, initial=self.state.step, unit="step",
                        desc=self.model_config.family)

    def _step(self, feed: StepFeed, signals: StopSignals, budget: float, window: Window) -> StepOutcome:
        st, cfg = self.state, self.config

        def stop_flags() -> list[float]:
            return [float(signals.received is not None), float(st.elapsed() >= budget)]

        if self.memory is not None:
            self.memory.before_step(st.position, self.batches_per_epoch)
        try:
            # the next step's batches made while the device computes this one, unless this is the last step
            last = st.step + 1 >= min(cfg.optim.max_steps, cfg.run.stop_at_step or cfg.optim.max_steps)
            ahead = feed.ahead if cfg.data.prepare_ahead and not last else None
            outcome = self.stepper.step(st.step, feed.next, stop_flags, window, ahead)
        except NonFinite as err:
            self._diverged(err)
        st.step += 1
        st.position += 1
        st.tokens_seen += int(outcome.tokens)
        st.words_seen += int(outcome.words)
        if self.bar is not None:
            self.bar.update(1)
        return outcome

    def _settled(self, outcome: StepOutcome, window: Window) -> StepOutcome:
        """The outcome with its loss and gradient norm read, the steps before it not yet read added to the window
        (run.check_every_step = false; with it true, every step was read at its end)."""
        if not self.stepper.unread:
            return outcome
        try:
            loss, grad_norm = self.stepper.settle(window)
        except NonFinite as err:
            self._diverged(err)
        return replace(outcome, loss=loss, grad_norm=grad_norm)

    def _log_step(self, outcome: StepOutcome, window: Window, budget: float) -> None:
        st = self.state
        loss, rate, parts = window.close()
        self.losses[1 if self.losses else 0:] = [loss]
        if self.data_schedule is not None:  # the batch of the step just taken
            parts = {**parts, "batch_size": batch_size_at(st.step - 1, self.config),
                     "seq_length": length_at(st.step - 1, self.config)}
        if self.metrics:
            self.metrics.record(step=st.step, loss=loss, lr=outcome.lr, grad_norm=outcome.grad_norm,
                                tokens_per_s=rate, elapsed_s=st.elapsed(), epoch=st.epoch, tokens=st.tokens_seen,
                                words=st.words_seen,
                                **span_summary(self.model), **parts)
        if self.bar is not None:
            extra = {"budget_left": f"{max(0.0, budget - st.elapsed()) / 60:.1f}min"} if math.isfinite(budget) else {}
            self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}", lr=f"{outcome.lr:.2e}", **extra)

    def _diverged(self, err: NonFinite) -> NoReturn:
        """Stop before a non-finite value reaches the weights, or (run.check_every_step = false) anything after it
        is logged or saved: no checkpoint is written, and the newest checkpoint on disk is the last good state.
        Every process sees the same all-reduced values, so all stop at the same step."""
        if self.bar is not None:
            self.bar.close()
        message = diverged_message(err, self.state.step, self.last_path)
        if self.metrics:  # into train.log; the console gets it once, as the command's one-line error
            self.metrics.log(f"ERROR: {message}", echo=False)
            self.metrics.plot()
        raise TrainingDiverged(message) from None

    def _lost_peer(self, err: BaseException) -> NoReturn:
        """Another process died or hung: one line, into train.log and as the command's error."""
        if self.bar is not None:
            self.bar.close()
        message = lost_peer_message(self.d, err, self.config.run.dist_timeout_s, self.state.step + 1, self.last_path)
        self._log_error(message)
        raise PeerLost(message) from None

    def _log_error(self, message: str) -> None:
        """Into train.log; the console gets it once, as the command's one-line error (a full disk may refuse
        even this line: the error is still raised)."""
        if self.metrics:
            with contextlib.suppress(OSError):
                self.metrics.log(f"ERROR: {message}", echo=False)

    # ---- evaluating, saving, finishing ----------------------------------------------------------------------

    def _eval_and_report(self) -> None:
        loss = self.evaluator.report(self.state.step, self.state.elapsed(), self.metrics, self.log)
        if loss is not None:
            self.state.last_eval = loss
            if self.metrics:
                self.metrics.plot()

    def save(self) -> Path:
        """Write a checkpoint of the current state (a collective: every process must call it)."""
        per_epoch = (self.batches_per_epoch if self.data_schedule is None
                     else self.data_schedule.steps_in_epoch(self.state))
        return self.checkpointer.save(self.state, per_epoch)

    def _finish(self, status: str, signals: StopSignals) -> TrainResult:
        """Report how the run ended and, unless interrupted, export the final model."""
        cfg, step = self.config, self.state.step
        exit_code = 0
        final = None
        if status == "interrupted":
            name, exit_code = signals.describe()
            self.log(f"stopped by {name} at step {step}; resume with --resume (checkpoint {self.last_path})")
        else:
            if self.ema is not None:  # the periodic losses are the raw weights'
                self.evaluator.report(step, self.state.elapsed(), self.metrics, self.log, ema=self.ema)
            final = export_final(self.run_dir, self.d, self.model, self.model_config, self.tokenizer, cfg, self.log,
                                 ema=self.ema)
            why = stop_reason(cfg, status, step, self.state.words_seen)
            self.log(f"{why} at step {step}; held-out loss {self.state.last_eval}; final model: {final} "
                     "(MaskplayModel.from_pretrained)")
            first, last = (self.losses[0], self.losses[-1]) if self.losses else (None, None)
            for note in end_notes(cfg, step, first, last):
                self.log(note)
        if self.metrics:
            self.metrics.plot()
        return TrainResult(run_dir=self.run_dir, step=step, status=status, exit_code=exit_code, final_dir=final,
                           checkpoint=self.last_path, eval_loss=self.state.last_eval)


def announce(run: Trainer) -> None:
    """The run's first lines: the model, the data and how it is split into steps (main process only)."""
    cfg, d = run.config, run.d
    if not d.is_main:
        return
    run.model_config.to_json(run.run_dir / "model_config.json")
    run.tokenizer.save(run.run_dir)
    n_long = int((run.lengths > cfg.data.max_length).sum())
    if n_long:
        run.log(f"WARNING: {n_long} of {len(run.lengths)} training sequences are longer than "
                 f"data.max_length={cfg.data.max_length} and are truncated")
    run.log(f"{run.model_config.family} model, {run.model.num_parameters():,} parameters, "
             f"vocabulary {run.model_config.vocab_size}; {len(run.train_data):,} training sequences "
             f"({run.train_data.num_tokens:,} tokens)"
             + (f" packed into {len(run.item_lengths):,} rows of at most {cfg.data.max_length} pieces "
                f"(mean {run.item_lengths.mean():.1f})" if run.packed is not None else "")
             + (f", {run.batches_per_epoch} steps per epoch; " if run.data_schedule is None else
                f", batches of {batch_size_at(0, cfg)} x {length_at(0, cfg)} pieces at step 0 (scheduled); ")
             + f"{d.world_size} process(es) x {cfg.optim.grad_accum} micro-batch(es) of {run.micro}; "
             f"device {run.device}, {run.precision.value}; run directory {run.run_dir}")
    if words := plan_line(cfg, run.train_data, len(run.item_lengths)):
        run.log(words)
    if d.enabled and not cfg.run.check_every_step:
        run.log("run.check_every_step = false reads the loss at logged steps on one process only: under DDP each "
                "step's all-reduced target count, which scales the gradient, is read at its end")



def train(config: TrainConfig, resume: bool = False, resume_from: str | Path | None = None,
          stream: TextIO | None = None, trainer_class: Callable[..., Trainer] | None = None) -> TrainResult:
    """Train (or resume) one run as `config` describes; under torchrun, one call per process. `trainer_class`: a
    Trainer subclass (or a factory taking Trainer's arguments) for a run that changes one of its units
    (maskplay.tasks.distill's DistillTrainer)."""
    config.validate()
    if config.run.threads is not None:
        torch.set_num_threads(config.run.threads)
    if config.run.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it to be deterministic
        torch.use_deterministic_algorithms(True, warn_only=True)
    d = setup_processes(config.run.device, config.run.dist_timeout_s)
    if config.run.flex_attention and d.device.type != "cuda":
        raise ValueError(f"run.flex_attention = true trains on a CUDA device only (torch's FlexAttention has no "
                         f"backward on {d.device.type}); set it false there")
    make = trainer_class or Trainer
    trainer = None
    completed = False
    try:
        with hold_run_directory(Path(config.run.out_dir), d), flex.using(config.run.flex_attention):
            trainer = make(config, d, resume=resume, resume_from=resume_from, stream=stream)
            result = trainer.run()
        completed = True
        return result
    except RuntimeError as err:  # a peer lost outside the training loop (start, export)
        if not peer_failure(d, err):
            raise
        raise PeerLost(lost_peer_message(d, err, config.run.dist_timeout_s)) from None
    finally:
        if trainer is not None and trainer.metrics is not None:
            trainer.metrics.close()
        # DDP's reducer holds the process group; were it still alive when the group is destroyed, gloo's worker
        # threads would be torn down at interpreter exit, which aborts a process now and then
        del trainer
        gc.collect()
        teardown(d, synchronize=completed)


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
