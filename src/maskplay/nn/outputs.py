from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor


def rows_of(selected: Tensor) -> Tensor:
    """The flat indices of the true positions of `selected`, in row-major order."""
    return selected.reshape(-1).nonzero().squeeze(1)


class _KnownRows:
    """The labels tensor of the batch being run and its labelled positions' flat indices, found by the caller on
    the host's copy (labelled_rows_known)."""

    labels: Tensor | None = None
    rows: Tensor | None = None
    # on a CPU, where a search reads nothing back, the rows are checked against it (benchmarks/probes/step_syncs.py, which
    # counts what a GPU would read with CPU tensors standing for the device's, turns this off: a GPU never checks)
    check_on_cpu = True


@contextmanager
def labelled_rows_known(labels: Tensor | None, rows: Tensor | None) -> Iterator[None]:
    """Within: Targets.of_labels given this very labels tensor takes `rows`, its labelled positions' flat indices
    that the caller found on the host's copy and sent with the batch, instead of finding them on the device (which
    reads their count back: a host synchronisation on a GPU, once a micro-batch); `rows` are those of the family's
    loss_labels(labels), found on the host's copy. Any other tensor is searched as before; so is every tensor
    while torch.compile traces."""
    before = _KnownRows.labels, _KnownRows.rows
    _KnownRows.labels, _KnownRows.rows = (labels, rows) if rows is not None else (None, None)
    try:
        yield
    finally:
        _KnownRows.labels, _KnownRows.rows = before


class Targets:
    """The labelled positions of a batch, found once: `selected` (B, L) bool -> their flat indices, in row-major
    order. take(x) is x[selected] for x of shape (B, L, ...), but through one index: a boolean mask is turned into
    indices, which reads its count back from the device (a host synchronisation on a GPU), every time it indexes,
    and again in the backward; this reads it once (benchmarks/probes/step_syncs.py), and of_labels not at all where the
    caller found them on the host."""

    def __init__(self, selected: Tensor, rows: Tensor | None = None) -> None:
        self.rows = rows_of(selected) if rows is None else rows
        self.dims = selected.dim()

    @classmethod
    def of_labels(cls, labels: Tensor, selected: Tensor, source: Tensor | None = None) -> Targets:
        """The positions `selected` of `labels` (those not ignored): the host's rows where labelled_rows_known
        gave them for this tensor, or for `source`, the batch's labels that the family made these from
        (MaskplayModel.loss_labels, whose result on the host's copy the rows were found in)."""
        if not torch.compiler.is_compiling() and _KnownRows.labels is (labels if source is None else source):
            rows = _KnownRows.rows
            if rows.device.type == "cpu" and _KnownRows.check_on_cpu and not torch.equal(rows, rows_of(selected)):
                raise RuntimeError("the labelled positions found on the host are not those of the labels the loss "
                                   "is over: the family's loss_labels and its forward disagree")
            return cls(selected, rows)
        return cls(selected)

    def take(self, x: Tensor) -> Tensor:
        return x.flatten(0, self.dims - 1).index_select(0, self.rows)


class ModelOutput:
    """What every family returns.

    loss: mean token loss over the targets (with labels).
    logits: (B, L, V) when no labels are given. With labels, the head runs only at the labelled positions
        (labels != -100) and logits is (N, V), one row per labelled position in row-major order. The loss is
        computed without materialising these logits, so with labels they are computed on first access.
    last_hidden_state: (B, L, H), the output of the last block.
    hidden_states: the input of the first block, then the output of every block (with output_hidden_states).
    parts: named components of the loss and training statistics (ELECTRA's generator and discriminator losses),
        each a mean over the batch (the losses keep their graph, for tests of where gradients go); logged by the trainer.
    mems: the memory for the next segment (XLNet; GPT with memory_length), one (B, M, H) tensor per layer (None otherwise).
    """

    def __init__(self, loss: Tensor | None = None, logits: Tensor | Callable[[], Tensor] | None = None,
                 last_hidden_state: Tensor | None = None, hidden_states: tuple[Tensor, ...] | None = None,
                 parts: dict[str, Tensor] | None = None) -> None:
        self.loss = loss
        self.parts = parts
        self._logits = logits
        self.last_hidden_state = last_hidden_state
        self.hidden_states = hidden_states
        self.mems: list[Tensor] | None = None

    @property
    def logits(self) -> Tensor | None:
        if callable(self._logits):
            self._logits = self._logits()
        return self._logits

    def __repr__(self) -> str:
        loss = None if self.loss is None else round(self.loss.detach().item(), 4)
        shape = None if self.last_hidden_state is None else tuple(self.last_hidden_state.shape)
        return f"ModelOutput(loss={loss}, last_hidden_state={shape})"
