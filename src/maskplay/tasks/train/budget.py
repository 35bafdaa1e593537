"""A schedule that fits the budget a run is given, and a run's end that says when it trained little.

fit_steps scales the warmup (and GPT-BERT's cooldown) with the steps, keeping the config's shares (plan.py uses it
for the steps that fit run.max_minutes); end_notes are the one-line warnings of a run that stopped in its warmup
or whose loss did not move."""

from __future__ import annotations

import dataclasses
import math

from .config import OptimSection, TrainConfig

FLAT_LOSS = 0.01  # a training loss that changed by less than this share from the first logged to the last


def fit_steps(optim: OptimSection, steps: int) -> OptimSection:
    """`optim` for a run of `steps` steps: warmup and cooldown scaled by steps / optim.max_steps (their shares of
    the run stay), each at least 1 where it was set."""
    scale = steps / optim.max_steps
    warmup = min(steps, max(1, round(optim.warmup_steps * scale))) if optim.warmup_steps else 0
    cooldown = min(steps - warmup, max(1, round(optim.cooldown_steps * scale))) if optim.cooldown_steps else 0
    return dataclasses.replace(optim, max_steps=steps, warmup_steps=warmup, cooldown_steps=cooldown)


def end_notes(config: TrainConfig, step: int, first_loss: float | None, last_loss: float | None) -> list[str]:
    """The warnings of a run that ended at `step` having trained little: still in its warmup (the learning rate
    never reached optim.lr), or a training loss that did not move (first and last logged losses of this process's
    part of the run)."""
    notes = []
    optim = config.optim
    if step < optim.warmup_steps:
        notes.append(f"WARNING: the run ended at step {step}, still in its warmup of optim.warmup_steps="
                     f"{optim.warmup_steps}: the learning rate never reached optim.lr={optim.lr:g}; give it more "
                     "time or steps, or a shorter warmup")
    if first_loss is not None and last_loss is not None and math.isfinite(first_loss) and \
            abs(last_loss - first_loss) < FLAT_LOSS * abs(first_loss) and step > config.run.log_every:
        notes.append(f"WARNING: the training loss did not move ({first_loss:.3f} -> {last_loss:.3f} over the run's "
                     "logged steps): the model learned next to nothing; check optim.lr, the schedule and the data")
    return notes

