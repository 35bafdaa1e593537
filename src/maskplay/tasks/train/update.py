"""One plain optimizer update, the core the fine-tuning loop (maskplay.tasks.finetune.loop) and SimCSE
(maskplay.tasks.simcse) share with each other: the step's rate set on every parameter group, the gradients zeroed, the
loss's backward, the gradient norm clipped, the update. Their optimizer and schedule are the pretraining loop's too
(train.schedule: parameter_groups / build_optimizer, learning_rate).

Why three loops remain, each with its own driver around this core: the pretraining loop (train/loop.py, its step
in stepping.Stepper) adds what only a long run needs - micro-batches and gradient accumulation, DDP, a precision
scaler, EMA weights, non-finite steps skipped, checkpoints that resume bit for bit; fine-tuning evaluates on dev
and keeps the best weights (early stopping); SimCSE stops on a step count, a wall-clock budget or one pass and
saves every save_every steps. None of them needs the others' extras, and the pretraining step's numbers are pinned
by its resume tests."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn


def apply_update(optimizer: torch.optim.Optimizer, loss: Tensor, lr: float, parameters: Iterable[nn.Parameter],
                 clip: float | None) -> None:
    """Set `lr` on every parameter group, backpropagate `loss` from zeroed gradients, clip the gradient norm of
    `parameters` to `clip` (None or 0: no clipping) and take the optimizer's step."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(parameters, clip)
    optimizer.step()
