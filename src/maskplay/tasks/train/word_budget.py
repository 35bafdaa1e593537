"""The words-seen budget (run.max_words) and the models exported at words seen (run.checkpoint_at_words), as the
BabyLM Challenge counts words: whitespace-separated words of the source text (data/words.py), summed over the
training sequences of every step (truncation to data.max_length included, packed rows by their sequences'
words, repeats of later epochs counted again). Every process adds the same all-reduced count, so all stop and
export at the same step; the counter is in every checkpoint, so a resumed run crosses the same marks at the same
steps."""

from __future__ import annotations

import math

from ...data.dataset import TokenDataset
from .config import TrainConfig


def uses_words(config: TrainConfig) -> bool:
    return config.run.max_words is not None or bool(config.run.checkpoint_at_words)


def check_word_counts(config: TrainConfig, train_data: TokenDataset) -> None:
    """A words budget needs the split's word counts (words.bin, written by `maskplay prepare`)."""
    if uses_words(config) and train_data.words is None:
        raise ValueError(f"run.max_words / run.checkpoint_at_words count source words, but {train_data.directory} "
                         "has no words.bin (prepared before word counts existed): prepare the corpus again with "
                         "`maskplay prepare`")


def words_reached(config: TrainConfig, words_seen: int) -> bool:
    return config.run.max_words is not None and words_seen >= config.run.max_words


def marks_crossed(config: TrainConfig, before: int, after: int) -> list[int]:
    """The run.checkpoint_at_words marks the step that took words seen from `before` to `after` reached."""
    return [w for w in config.run.checkpoint_at_words if before < w <= after]


def plan_line(config: TrainConfig, train_data: TokenDataset, n_items: int) -> str | None:
    """What the run's start says about words: the split's words, the mean words per step, and how many steps
    run.max_words is (with a warning when optim.max_steps ends the run first or the schedule outlasts it)."""
    total = train_data.num_words
    if total is None or not n_items:
        return None
    per_step = total / n_items * config.data.batch_size
    line = f"source words: {total:,} in the training split, about {per_step:,.0f} per step"
    budget = config.run.max_words
    if budget is None:
        return line
    steps = math.ceil(budget / per_step)
    line += f"; run.max_words={budget:,} is about {steps:,} steps (optim.max_steps={config.optim.max_steps:,})"
    if config.optim.max_steps < 0.98 * steps:
        line += ("; WARNING: optim.max_steps comes first, so the run ends before its words budget")
    elif config.optim.max_steps > 1.1 * steps:
        line += ("; WARNING: the learning-rate schedule runs to optim.max_steps, past the words budget, so the run "
                 "ends before its learning rate has decayed")
    return line
