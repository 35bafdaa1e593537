"""GPT-BERT's data schedules: a batch-size ramp (data.batch_ramp) and a sequence-length schedule (data.length_at /
data.length_to), both pure functions of the optimizer step, so that a resumed run draws the very same batches.

At step s of T = optim.max_steps, with B = data.batch_size and L0 = data.max_length:

    length(s) = length_to[i] for the last i with s >= round(length_at[i] x T), else L0
    batch(s)  = round(B x ramp(s) x L0 / length(s)),  ramp(s) = a + (1 - a) x min(1, s / (batch_ramp x T))

(a = data.batch_ramp_start; ramp = 1 when batch_ramp = 0), so batch x length, the tokens of a step, stays
B x L0 once the ramp is done. Sequences (or with data.pack the packed rows, packed at length(s)) are drawn from a
seeded shuffle of the split, one epoch after another; an epoch also ends where the length changes, and the next
one packs the split again at the new length. An epoch's steps are a pure function of the step it started at
(state.step - state.position) and its number, so (step, epoch, position) is all a resumed run needs. A step's
batch is cut into grad_accum x processes micro-batches as evenly as it divides (the loss is normalised by the
global target count, so uneven micro-batches change nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ...data.dataset import TokenDataset, pad_batch
from .batches import MicroBatches, epoch_steps, pack_groups, row_tokens, row_words
from .config import TrainConfig
from .distributed import Dist
from .state import TrainState


def scheduled(config: TrainConfig) -> bool:
    """Whether the run's batches follow a schedule (else batches.py's fixed batches)."""
    return bool(config.data.batch_ramp or config.data.length_at)


def change_steps(config: TrainConfig) -> list[int]:
    """The steps at which the sequence length changes (data.length_at x optim.max_steps, rounded)."""
    return [int(round(a * config.optim.max_steps)) for a in config.data.length_at]


def length_at(step: int, config: TrainConfig) -> int:
    length = config.data.max_length
    for start, value in zip(change_steps(config), config.data.length_to, strict=True):
        if step >= start:
            length = value
    return length


def batch_size_at(step: int, config: TrainConfig) -> int:
    data = config.data
    ramp = 1.0
    if data.batch_ramp:
        done = min(1.0, step / (data.batch_ramp * config.optim.max_steps))
        ramp = data.batch_ramp_start + (1.0 - data.batch_ramp_start) * done
    return max(1, int(data.batch_size * ramp * data.max_length / length_at(step, config) + 0.5))


class DataSchedule:
    """The scheduled batches of one run over a split's sequence lengths."""

    def __init__(self, config: TrainConfig, lengths: np.ndarray) -> None:
        self.config = config
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self._bounds: dict[int, np.ndarray | None] = {}

    def bounds(self, length: int) -> np.ndarray | None:
        """The packed rows at this length (pack_groups), or None without data.pack."""
        if length not in self._bounds:
            self._bounds[length] = pack_groups(self.lengths, length) if self.config.data.pack else None
        return self._bounds[length]

    def num_items(self, length: int) -> int:
        bounds = self.bounds(length)
        return len(self.lengths) if bounds is None else len(bounds) - 1

    def plan(self, start: int) -> np.ndarray:
        """(steps, 2): the (offset, size) in the epoch's shuffled order of each step of the epoch that starts at
        step `start`: batches of batch_size_at(s) while the split lasts and the length stays length_at(start)."""
        length = length_at(start, self.config)
        n = self.num_items(length)
        rows: list[tuple[int, int]] = []
        offset, step = 0, start
        while length_at(step, self.config) == length:
            size = batch_size_at(step, self.config)
            if offset + size > n:
                break
            rows.append((offset, size))
            offset += size
            step += 1
        if not rows:
            raise ValueError(f"step {start}: the training split has {n} sequences (rows) of at most {length} "
                             f"pieces, fewer than one batch of {batch_size_at(start, self.config)}")
        return np.asarray(rows, dtype=np.int64)

    def steps_in_epoch(self, state: TrainState) -> int:
        return len(self.plan(state.step - state.position))

    def check(self, d: Dist) -> None:
        """Before the first step: every batch splits into grad_accum x processes micro-batches and every length
        phase has at least one batch (where a batch is smallest and where it is largest)."""
        cfg = self.config
        per = cfg.optim.grad_accum * d.world_size
        starts = [0, *change_steps(cfg)]
        ends = [s - 1 for s in starts[1:]] + [cfg.optim.max_steps - 1]
        for start, end in zip(starts, ends, strict=True):
            for step in (start, end):
                size, length = batch_size_at(step, cfg), length_at(step, cfg)
                if size < per:
                    raise ValueError(f"data.batch_ramp / data.length_to: the batch of step {step} is {size} "
                                     f"sequences, fewer than optim.grad_accum x processes = {per}")
                if size > self.num_items(length):
                    raise ValueError(f"the training split has {self.num_items(length)} sequences (rows) at length "
                                     f"{length}, fewer than the batch of {size} of step {step}")

    def stream(self, state: TrainState, d: Dist, directory: str | Path,
               pad_id: int) -> Iterator[list[tuple[Tensor, Tensor]]]:
        """This process's micro-batches of every remaining step, from the state's position; it moves the state
        to the next epoch when one ends (the loop advances state.step and state.position)."""
        cfg = self.config
        while True:
            start = state.step - state.position
            plan = self.plan(start)
            if state.position >= len(plan):
                state.epoch, state.position = state.epoch + 1, 0
                continue
            length = length_at(start, cfg)
            order = np.random.default_rng([cfg.data.seed, state.epoch]).permutation(self.num_items(length))
            steps = ScheduledBatches(directory, order, plan, d.rank, d.world_size, cfg.optim.grad_accum, length,
                                     pad_id, self.bounds(length))
            yield from epoch_steps(steps, state.position, state.epoch, cfg.data.num_workers)


class ScheduledBatches(torch.utils.data.Dataset):
    """Item k: this process's micro-batches of step k of an epoch, each (input_ids, attention_mask) padded."""

    def __init__(self, directory: str | Path, order: np.ndarray, plan: np.ndarray, rank: int, world_size: int,
                 grad_accum: int, length: int, pad_id: int, packed: np.ndarray | None) -> None:
        self.directory = Path(directory)
        self.order, self.plan, self.packed = order, plan, packed
        self.rank, self.world_size, self.grad_accum = rank, world_size, grad_accum
        self.length, self.pad_id = length, pad_id
        self._data: TokenDataset | None = None

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, k: int) -> MicroBatches:
        if self._data is None:
            self._data = TokenDataset(self.directory)
        offset, size = (int(x) for x in self.plan[k])
        parts = np.array_split(self.order[offset:offset + size], self.world_size * self.grad_accum)
        mine = parts[self.rank * self.grad_accum:(self.rank + 1) * self.grad_accum]
        words = sum(row_words(self._data, self.packed, int(i), self.length) for part in mine for i in part)
        return MicroBatches([pad_batch([row_tokens(self._data, self.packed, int(i))[: self.length] for i in part],
                                       self.pad_id)
                             for part in mine], words)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_data": None}
