"""Which sequences make up each optimizer step, as a pure function of (seed, epoch, step in the epoch).

Nothing here carries state from one step to the next, so a resumed run only needs the position (epoch, step
within the epoch) to draw the very same batches, with or without DataLoader workers. A global batch is cut
into world_size x grad_accum contiguous micro-batches; process r takes micro-batches r*A .. r*A + A - 1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ...data.dataset import TokenDataset, pad_batch
from .config import TrainConfig
from .distributed import Dist
from .state import TrainState


def sequence_lengths(dataset: TokenDataset) -> np.ndarray:
    return np.diff(np.asarray(dataset.offsets, dtype=np.int64))


def pack_groups(lengths: np.ndarray, max_length: int) -> np.ndarray:
    """Sequence packing: consecutive sequences of the split (sentences of one document follow each other) joined
    greedily into rows of at most max_length pieces, each sequence keeping its own [SOS] / [EOS]. Returns the
    row boundaries, (n_rows + 1,): row r is sequences bounds[r] .. bounds[r + 1] - 1. A sequence longer than
    max_length is a row of its own (and truncated, as without packing)."""
    if max_length <= 0:
        raise ValueError(f"max_length must be positive, got {max_length}")
    bounds = [0]
    used = 0
    for i, n in enumerate(np.asarray(lengths, dtype=np.int64).tolist()):
        if used and used + n > max_length:
            bounds.append(i)
            used = 0
        used += n
    if len(lengths):
        bounds.append(len(lengths))
    return np.asarray(bounds, dtype=np.int64)


def packed_lengths(lengths: np.ndarray, bounds: np.ndarray, max_length: int) -> np.ndarray:
    """Each packed row's length in pieces (after truncation to max_length)."""
    sums = np.add.reduceat(np.asarray(lengths, dtype=np.int64), bounds[:-1]) if len(bounds) > 1 else np.zeros(0)
    return np.minimum(sums, max_length).astype(np.int64)


def epoch_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, window: int,
                  curriculum_steps: int = 0) -> np.ndarray:
    """(n_batches, batch_size) sequence indices for one epoch: a seeded shuffle; with window > 1 the shuffled
    order is sorted by length within chunks of `window` batches (less padding) and the batches are shuffled
    again. The last incomplete batch is dropped, so every step sees exactly batch_size sequences.

    curriculum_steps > 0 (a sentence-length curriculum): in epoch 0 the first curriculum_steps batches of that
    order are put in order of their mean length, shortest first, so training starts on short sentences and moves
    to long ones while seeing exactly the batches it would have seen without the curriculum."""
    if curriculum_steps < 0:
        raise ValueError(f"curriculum_steps must be >= 0, got {curriculum_steps}")
    n_batches = len(lengths) // batch_size
    if n_batches == 0:
        raise ValueError(f"the training split has {len(lengths)} sequences, fewer than one batch of {batch_size}")
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))[: n_batches * batch_size]
    if window > 1:
        chunk = window * batch_size
        for start in range(0, len(order), chunk):
            part = order[start:start + chunk]
            order[start:start + chunk] = part[np.argsort(lengths[part], kind="stable")]
        batches = order.reshape(n_batches, batch_size)[rng.permutation(n_batches)]
    else:
        batches = order.reshape(n_batches, batch_size)
    if curriculum_steps and epoch == 0:
        head = batches[:curriculum_steps]
        batches[:curriculum_steps] = head[np.argsort(lengths[head].mean(axis=1), kind="stable")]
    return batches


class MicroBatches(list):
    """This process's micro-batches of one step, each (input_ids, attention_mask), and `words`: the source words
    (data/words.py) in the pieces they hold, truncation included; 0 where the split has no word counts."""

    def __init__(self, items: list[tuple[Tensor, Tensor]], words: int = 0) -> None:
        super().__init__(items)
        self.words = words


def row_tokens(data: TokenDataset, packed: np.ndarray | None, i: int) -> np.ndarray:
    """The pieces of item i: a sequence, or with `packed` the sequences of packed row i back to back."""
    if packed is None:
        return data[i]
    return np.concatenate([data[j] for j in range(int(packed[i]), int(packed[i + 1]))])


def row_words(data: TokenDataset, packed: np.ndarray | None, i: int, length: int) -> int:
    """The source words of item i (a sequence, or with `packed` a packed row) truncated to `length` pieces: one
    slice of words.bin, since a packed row's sequences lie back to back in the split."""
    if data.words is None:
        return 0
    first, last = (i, i + 1) if packed is None else (int(packed[i]), int(packed[i + 1]))
    start = int(data.offsets[first])
    return int(data.words[start:min(int(data.offsets[last]), start + length)].sum(dtype=np.int64))


class StepBatches(torch.utils.data.Dataset):
    """Item k: this process's micro-batches of step k of an epoch, each (input_ids, attention_mask) padded.
    Opens the split lazily, so DataLoader workers each map it themselves instead of copying it. With `packed`
    (pack_groups' bounds) the batches index packed rows, each the concatenation of its sequences."""

    def __init__(self, directory: str | Path, batches: np.ndarray, rank: int, world_size: int, grad_accum: int,
                 max_length: int, pad_id: int, packed: np.ndarray | None = None) -> None:
        self.directory = Path(directory)
        self.batches = batches
        self.packed = packed
        self.rank, self.world_size, self.grad_accum = rank, world_size, grad_accum
        self.max_length, self.pad_id = max_length, pad_id
        self.micro = batches.shape[1] // (world_size * grad_accum)
        self._data: TokenDataset | None = None

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, step: int) -> MicroBatches:
        if self._data is None:
            self._data = TokenDataset(self.directory)
        rows = self.batches[step]
        out = []
        words = 0
        for m in range(self.grad_accum):
            first = (self.rank * self.grad_accum + m) * self.micro
            mine = [int(i) for i in rows[first:first + self.micro]]
            out.append(pad_batch([row_tokens(self._data, self.packed, i)[: self.max_length] for i in mine], self.pad_id))
            words += sum(row_words(self._data, self.packed, i, self.max_length) for i in mine)
        return MicroBatches(out, words)

    def __getstate__(self) -> dict:
        # a worker process reopens the memory map rather than receiving a copy of it
        return {**self.__dict__, "_data": None}


class StepFeed:
    """The run's micro-batches step by step from its stream (step_stream, DataSchedule.stream, stream_steps), the
    next step's fetchable early (data.prepare_ahead). A stream reads the state's position when it starts an epoch,
    and moves the state into it; the loop advances the state after each step. So an early fetch shows the stream
    the state as it will be after this step and then puts the state back, and the step that takes those
    micro-batches moves the state into the epoch they belong to: between steps the state is as without it."""

    def __init__(self, state: TrainState, stream: Iterator[list[tuple[Tensor, Tensor]]]) -> None:
        self.state, self.stream = state, stream
        self.early: tuple[list[tuple[Tensor, Tensor]], tuple[int, int]] | None = None

    def next(self) -> list[tuple[Tensor, Tensor]]:
        """This step's micro-batches (the very list `ahead` returned, if it ran)."""
        if self.early is None:
            return next(self.stream)
        micro_batches, (self.state.epoch, self.state.position) = self.early
        self.early = None
        return micro_batches

    def ahead(self) -> list[tuple[Tensor, Tensor]]:
        """The next step's micro-batches, fetched during this one."""
        st = self.state
        kept = st.step, st.epoch, st.position
        st.step, st.position = st.step + 1, st.position + 1
        try:
            micro_batches = next(self.stream)
            self.early = micro_batches, (st.epoch, st.position)
        finally:
            st.step, st.epoch, st.position = kept
        return micro_batches


def eval_batches(dataset: TokenDataset, n_sequences: int, micro: int, max_length: int,
                 pad_id: int) -> list[tuple[Tensor, Tensor]]:
    """The fixed held-out set: the first n_sequences of the split, sorted by length (less padding), in
    batches of `micro` sequences."""
    n = min(n_sequences, len(dataset))
    seqs = [dataset[i][:max_length] for i in range(n)]
    seqs.sort(key=len)
    return [pad_batch(seqs[i:i + micro], pad_id) for i in range(0, n, micro)]


def step_stream(state: TrainState, config: TrainConfig, d: Dist, directory: str | Path, item_lengths: np.ndarray,
                pad_id: int, packed: np.ndarray | None) -> Iterator[list[tuple[Tensor, Tensor]]]:
    """This process's micro-batches of every remaining step, epoch after epoch, from the state's position; it
    moves state to the next epoch when it starts one (the loop advances state.position)."""
    cfg = config
    while True:
        if state.position >= len(item_lengths) // cfg.data.batch_size:
            state.epoch, state.position = state.epoch + 1, 0
        order = epoch_batches(item_lengths, cfg.data.batch_size, cfg.data.seed, state.epoch,
                              cfg.data.bucket_window, cfg.data.curriculum_steps)
        steps = StepBatches(directory, order, d.rank, d.world_size, cfg.optim.grad_accum,
                            cfg.data.max_length, pad_id, packed)
        yield from epoch_steps(steps, state.position, state.epoch, cfg.data.num_workers)


def epoch_steps(steps: torch.utils.data.Dataset, start: int, epoch: int,
                num_workers: int) -> Iterator[MicroBatches]:
    """Items start.. of an epoch's step dataset, in order: read in the loop, or by a DataLoader's workers."""
    remaining = range(start, len(steps))
    if not num_workers:
        for k in remaining:
            yield steps[k]
        return
    # its own generator: a DataLoader otherwise draws its workers' seed from the global RNG, which would shift the
    # dropout stream
    yield from torch.utils.data.DataLoader(steps, batch_size=None, sampler=remaining, num_workers=num_workers,
                                           generator=torch.Generator().manual_seed(epoch), collate_fn=_as_is)


def _as_is(item: MicroBatches) -> MicroBatches:
    """The DataLoader's collate function: the step's items unchanged (its default would rebuild the list and
    drop MicroBatches.words)."""
    return item
