"""Which sequences make up each optimizer step, as a pure function of (seed, epoch, step in the epoch).

Nothing here carries state from one step to the next, so a resumed run only needs the position (epoch, step
within the epoch) to draw the very same batches, with or without DataLoader workers. A global batch is cut
into world_size x grad_accum contiguous micro-batches; process r takes micro-batches r*A .. r*A + A - 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..data.dataset import TokenDataset, pad_batch


def sequence_lengths(dataset: TokenDataset) -> np.ndarray:
    return np.diff(np.asarray(dataset.offsets, dtype=np.int64))


def epoch_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, window: int) -> np.ndarray:
    """(n_batches, batch_size) sequence indices for one epoch: a seeded shuffle; with window > 1 the shuffled
    order is sorted by length within chunks of `window` batches (less padding) and the batches are shuffled
    again. The last incomplete batch is dropped, so every step sees exactly batch_size sequences."""
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
        return order.reshape(n_batches, batch_size)[rng.permutation(n_batches)]
    return order.reshape(n_batches, batch_size)


class StepBatches(torch.utils.data.Dataset):
    """Item k: this process's micro-batches of step k of an epoch, each (input_ids, attention_mask) padded.
    Opens the split lazily, so DataLoader workers each map it themselves instead of copying it."""

    def __init__(self, directory: str | Path, batches: np.ndarray, rank: int, world_size: int, grad_accum: int,
                 max_length: int, pad_id: int) -> None:
        self.directory = Path(directory)
        self.batches = batches
        self.rank, self.world_size, self.grad_accum = rank, world_size, grad_accum
        self.max_length, self.pad_id = max_length, pad_id
        self.micro = batches.shape[1] // (world_size * grad_accum)
        self._data: TokenDataset | None = None

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, step: int) -> list[tuple[Tensor, Tensor]]:
        if self._data is None:
            self._data = TokenDataset(self.directory)
        rows = self.batches[step]
        out = []
        for m in range(self.grad_accum):
            first = (self.rank * self.grad_accum + m) * self.micro
            seqs = [self._data[int(i)][: self.max_length] for i in rows[first:first + self.micro]]
            out.append(pad_batch(seqs, self.pad_id))
        return out

    def __getstate__(self) -> dict:
        # a worker process reopens the memory map rather than receiving a copy of it
        return {**self.__dict__, "_data": None}


def eval_batches(dataset: TokenDataset, n_sequences: int, micro: int, max_length: int,
                 pad_id: int) -> list[tuple[Tensor, Tensor]]:
    """The fixed held-out set: the first n_sequences of the split, sorted by length (less padding), in
    batches of `micro` sequences."""
    n = min(n_sequences, len(dataset))
    seqs = [dataset[i][:max_length] for i in range(n)]
    seqs.sort(key=len)
    return [pad_batch(seqs[i:i + micro], pad_id) for i in range(0, n, micro)]
