"""The fine-tuning loop: AdamW with linear warmup and decay (maskplay.tasks.train.schedule), each step
train.update.apply_update (the core SimCSE shares; why the pretraining loop keeps its own is written there), the dev
metric after every epoch (or eval_every steps), early stopping, and the weights of the best dev evaluation kept."""

from __future__ import annotations

import copy
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...data.tokenizer import Tokenizer
from ...families import MaskplayModel
from ...runtime.progress import Progress
from .batches import encode_examples, make_batch
from .data import Example, label_values
from .evaluation import default_metric, metrics, predict_rows
from .model import FineTuned, HeadConfig


@dataclass
class FinetuneOptions:
    lr: float = 5e-5
    batch_size: int = 32
    epochs: int = 3
    max_steps: int | None = None  # overrides epochs for the schedule's length
    warmup: float = 0.1  # fraction of the steps
    weight_decay: float = 0.01
    patience: int | None = None  # evaluations without improvement before stopping; None = run all
    eval_every: int | None = None  # steps between dev evaluations; None = once per epoch
    max_minutes: float | None = None
    clip: float = 1.0
    seed: int = 0
    metric: str | None = None  # default: mcc (classify), pearson (regress)
    progress: bool = True  # a bar when stderr is a terminal, else a plain line every 30 s (maskplay.runtime.progress)

    def __post_init__(self) -> None:
        """Every bad option as one ValueError naming it (the command-line names; the CLI refuses them earlier)."""
        import math

        for name, value, least in (("--batch-size", self.batch_size, 1), ("--epochs", self.epochs, 1),
                                   ("--max-steps", self.max_steps, 1), ("--patience", self.patience, 1),
                                   ("--eval-every", self.eval_every, 1), ("--seed", self.seed, 0)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        for name, value, low, high in (("--lr", self.lr, 0, math.inf), ("--warmup", self.warmup, 0, 1),
                                       ("--weight-decay", self.weight_decay, 0, math.inf),
                                       ("--max-minutes", self.max_minutes, 0, math.inf), ("clip", self.clip, 0, math.inf)):
            if value is not None and not (math.isfinite(value) and low <= value < high and (name != "--lr" or value > 0)):
                raise ValueError(f"{name} must be a finite number in [{low}, {high}), got {value!r}")


@dataclass
class FinetuneResult:
    model: FineTuned
    best: dict[str, Any]
    history: list[dict[str, Any]]
    steps: int
    seconds: float


def finetune(backbone: MaskplayModel, tokenizer: Tokenizer, head: HeadConfig, train: Sequence[Example],
             dev: Sequence[Example], options: FinetuneOptions | None = None, log: Any = None) -> FinetuneResult:
    """AdamW + linear warmup/decay (maskplay.tasks.train.schedule); the dev metric after every epoch (or eval_every
    steps); the weights of the best dev evaluation are the ones returned."""
    from ..train.config import OptimSection
    from ..train.schedule import build_optimizer, learning_rate
    from ..train.update import apply_update

    options = options or FinetuneOptions()
    metric = options.metric or default_metric(head)
    allowed = ("accuracy", "mcc") if head.objective == "classify" else ("pearson", "spearman")
    if metric not in allowed:
        raise ValueError(f"metric {metric!r} does not apply to {head.objective}; choose one of {list(allowed)}")
    if not train or not dev:
        raise ValueError("fine-tuning needs training and dev examples")
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    torch.manual_seed(options.seed)
    model = FineTuned(backbone, head)
    device = next(model.parameters()).device
    train_rows = encode_examples(train, tokenizer, model.config, head.pair)
    train_labels = label_values(train, head)
    per_epoch = math.ceil(len(train_rows) / options.batch_size)
    total = options.max_steps if options.max_steps is not None else per_epoch * options.epochs
    if total < 1:
        raise ValueError("nothing to train: max_steps/epochs give 0 steps")
    optim = OptimSection(lr=options.lr, weight_decay=options.weight_decay, max_steps=total,
                         warmup_steps=int(options.warmup * total))
    optimizer = build_optimizer(model, optim)
    generator = torch.Generator().manual_seed(options.seed)
    eval_every = options.eval_every or per_epoch
    bar = Progress(total=total, desc="finetune", unit="step", leave=False, enabled=options.progress)
    judge = _DevJudge(model, head, encode_examples(dev, tokenizer, model.config, head.pair), label_values(dev, head),
                      metric, per_epoch, total, bar.write if bar.mode == "bar" else log)
    step, start, running, stop = 0, time.monotonic(), [], False
    model.train()
    while step < total and not stop:
        order = torch.randperm(len(train_rows), generator=generator).tolist()
        for s in range(0, len(order), options.batch_size):
            idx = order[s:s + options.batch_size]
            batch = make_batch([train_rows[k] for k in idx], model.config, head.pair, device)
            loss = model.loss(model(**batch), train_labels[idx].to(device))
            apply_update(optimizer, loss, learning_rate(step, optim), model.parameters(), options.clip)
            step += 1
            running.append(float(loss.detach()))
            bar.set_postfix(loss=f"{np.mean(running[-20:]):.4f}")
            bar.update(1)
            out_of_time = options.max_minutes is not None and time.monotonic() - start > options.max_minutes * 60
            if step % eval_every == 0 or step == total or out_of_time:
                stop = judge.evaluate(step, running, time.monotonic() - start, options.patience)
                running = []
            if stop or step >= total or out_of_time:
                stop = stop or out_of_time
                break
    bar.close()
    if judge.best_state is not None:
        model.load_state_dict(judge.best_state)
    model.eval()
    return FinetuneResult(model=model, best=judge.best, history=judge.history, steps=step,
                          seconds=time.monotonic() - start)


class _DevJudge:
    """The dev evaluations of a fine-tuning run: their history, the best one and its weights, early stopping."""

    def __init__(self, model: FineTuned, head: HeadConfig, rows: list[list[int]], labels: Tensor, metric: str,
                 per_epoch: int, total: int, log: Any) -> None:
        self.model, self.head, self.rows, self.labels, self.metric = model, head, rows, labels, metric
        self.per_epoch, self.total, self.log = per_epoch, total, log
        self.history: list[dict[str, Any]] = []
        self.best: dict[str, Any] = {}
        self.best_state: dict[str, Tensor] | None = None
        self.bad = 0

    def evaluate(self, step: int, running: list[float], seconds: float, patience: int | None) -> bool:
        """Evaluate on dev, keep the weights if they are the best so far, log a line; True = stop early."""
        scores = metrics(self.head, predict_rows(self.model, self.rows), self.labels.numpy())
        record = {"step": step, "epoch": round(step / self.per_epoch, 3), "train_loss": float(np.mean(running)),
                  **{f"dev_{k}": v for k, v in scores.items()}, "seconds": round(seconds, 1)}
        self.history.append(record)
        improved = not self.best or scores[self.metric] > self.best[f"dev_{self.metric}"]
        if improved:
            self.best, self.bad = record, 0
            self.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in self.model.state_dict().items()})
        else:
            self.bad += 1
        self.log(f"step {step}/{self.total} epoch {record['epoch']:g} train loss {record['train_loss']:.4f} "
                 + " ".join(f"dev {k} {v:.4f}" for k, v in scores.items()) + (" *" if improved else ""))
        if patience is not None and self.bad >= patience:
            self.log(f"early stopping: no better dev {self.metric} in {self.bad} evaluations")
            return True
        return False
