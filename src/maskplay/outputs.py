from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class ModelOutput:
    """What every family returns.

    logits: (B, L, V) when no labels are given. With labels, the head runs only at the labelled positions
        (labels != -100) and logits is (N, V), one row per labelled position in row-major order.
    hidden_states: the input of the first block, then the output of every block (with output_hidden_states).
    """

    loss: Tensor | None = None
    logits: Tensor | None = None
    last_hidden_state: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
