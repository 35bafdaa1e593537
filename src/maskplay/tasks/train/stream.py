"""The contiguous-stream data mode (data.stream) and Transformer-XL's memory between steps (run.memory_length).

data.stream reads a split as one stream of tokens, its sequences in the order they were prepared (the sentences of
a document follow each other, documents follow each other), and cuts it into data.batch_size lanes of equal length,
as Transformer-XL batches WikiText-103: lane b is tokens [b N / B, (b + 1) N / B). Step k of an epoch takes from
every lane its k-th segment of data.max_length tokens, so each batch row reads its lane's text in order across steps,
and an epoch is N / (B x max_length) steps. Like batches.py, a step's batch is a pure function of its position in
the epoch (every epoch reads the same lanes), so a resumed run draws the very same segments.

With run.memory_length M > 0 each micro-batch's memory (each layer's input over the last M tokens of its lanes,
ModelOutput.mems) is carried to the same micro-batch of the next step, detached; it starts empty at every epoch's
first step and is saved in every checkpoint (memory.safetensors), so a run resumed inside a document goes on
bitwise as the uninterrupted one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ...data.dataset import TokenDataset
from .batches import epoch_steps
from .config import TrainConfig
from .distributed import Dist
from .state import TrainState

MEMORY_FILE = "memory.safetensors"


def lane_length(n_tokens: int, lanes: int, segment: int) -> int:
    """Tokens per lane, a whole number of segments; one-line error when the split holds less than one step."""
    per_lane = (n_tokens // lanes) // segment * segment
    if per_lane == 0:
        raise ValueError(f"data.stream: the split's {n_tokens:,} tokens do not fill {lanes} lanes of one segment "
                         f"of {segment} tokens (data.batch_size x data.max_length)")
    return per_lane


class StreamSteps(torch.utils.data.Dataset):
    """Item k: this process's micro-batches of step k of an epoch, each (input_ids, attention_mask), no padding."""

    def __init__(self, directory: str | Path, lanes: int, segment: int, rank: int, world_size: int,
                 grad_accum: int) -> None:
        self.directory = Path(directory)
        self.lanes, self.segment = lanes, segment
        self.rank, self.world_size, self.grad_accum = rank, world_size, grad_accum
        self.micro = lanes // (world_size * grad_accum)
        self._data: TokenDataset | None = None
        self.per_lane = lane_length(TokenDataset(self.directory).num_tokens, lanes, segment)

    def __len__(self) -> int:
        return self.per_lane // self.segment

    def __getitem__(self, step: int) -> list[tuple[Tensor, Tensor]]:
        if self._data is None:
            self._data = TokenDataset(self.directory)
        start = step * self.segment
        out = []
        for m in range(self.grad_accum):
            first = (self.rank * self.grad_accum + m) * self.micro
            rows = [self._data.tokens[b * self.per_lane + start:b * self.per_lane + start + self.segment]
                    for b in range(first, first + self.micro)]
            ids = torch.as_tensor(np.stack(rows).astype(np.int64))
            out.append((ids, torch.ones_like(ids, dtype=torch.bool)))
        return out

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_data": None}


def stream_of(config: TrainConfig, d: Dist, directory: str | Path) -> StreamSteps | None:
    """The run's stream of steps under data.stream, else None."""
    if not config.data.stream:
        return None
    return StreamSteps(directory, config.data.batch_size, config.data.max_length, d.rank, d.world_size,
                       config.optim.grad_accum)


def stream_steps(state: TrainState, config: TrainConfig, d: Dist, directory: str | Path,
                 steps: StreamSteps) -> Iterator[list[tuple[Tensor, Tensor]]]:
    """This process's micro-batches of every remaining step, epoch after epoch, from the state's position."""
    while True:
        if state.position >= len(steps):
            state.epoch, state.position = state.epoch + 1, 0
        yield from epoch_steps(steps, state.position, state.epoch, config.data.num_workers)


def stream_eval_batches(dataset: TokenDataset, segments: int, lanes: int, segment: int) -> list[tuple[Tensor, Tensor]]:
    """The held-out stream: `lanes` lanes of the split, their first `segments` segments in order (fewer when the
    split is shorter)."""
    n = dataset.num_tokens
    per_lane = (n // lanes) // segment * segment
    count = min(segments, per_lane // segment)
    out = []
    for k in range(count):
        rows = [dataset.tokens[b * per_lane + k * segment:b * per_lane + (k + 1) * segment] for b in range(lanes)]
        ids = torch.as_tensor(np.stack(rows).astype(np.int64))
        out.append((ids, torch.ones_like(ids, dtype=torch.bool)))
    return out


class SegmentMemory:
    """Transformer-XL's memory between training steps: per micro-batch index, one tensor per layer (see the
    module's docstring)."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.slots: dict[int, list[Tensor]] = {}

    def reset(self) -> None:
        self.slots.clear()

    def before_step(self, position: int, steps_per_epoch: int) -> None:
        """Empty at an epoch's first step (position 0, or past the last step of the epoch before): every lane
        starts again from its beginning."""
        if position == 0 or position >= steps_per_epoch:
            self.reset()

    def get(self, micro: int) -> list[Tensor] | None:
        return self.slots.get(micro)

    def put(self, micro: int, mems: list[Tensor]) -> None:
        self.slots[micro] = [m.detach() for m in mems]

    def to_tensors(self) -> dict[str, Tensor]:
        return {f"{micro}/{layer}": t for micro, mems in self.slots.items() for layer, t in enumerate(mems)}

    def load(self, tensors: dict[str, Tensor], device: torch.device) -> None:
        """The memory of a checkpoint (to_tensors' names)."""
        self.slots = {}
        for name in sorted(tensors, key=lambda k: tuple(int(p) for p in k.split("/"))):
            micro, _ = (int(p) for p in name.split("/"))
            self.slots.setdefault(micro, []).append(tensors[name].to(device))
