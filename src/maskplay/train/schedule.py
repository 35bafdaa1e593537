"""AdamW parameter groups (BERT's weight-decay convention) and the learning-rate schedule.

The rate is a pure function of the step, so a resumed run needs nothing but the step to continue it."""

from __future__ import annotations

import torch
from torch import nn

from .config import OptimSection


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights, and without decay (as BERT has it) biases and norm gains (LayerNorm and
    RMSNorm), plus what a module lists in its `no_weight_decay()`: parameters whose natural value is not zero
    (talking heads' identity-initialised mixing matrices) or that are biases by role (XLNet's u/v/segment
    biases, T5's bucket table: HuggingFace's convention excludes every name with "bias" in it) or that have a
    penalty of their own (adaptive spans). Parameters are given as (name, tensor) pairs, so every group carries
    torch's `param_names` and state is saved by name."""
    decay: list[tuple[str, nn.Parameter]] = []
    no_decay: list[tuple[str, nn.Parameter]] = []
    exempt = {id(p) for m in model.modules() if hasattr(m, "no_weight_decay") for p in m.no_weight_decay()}
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            full = f"{module_name}.{name}" if module_name else name
            skip = isinstance(module, (nn.LayerNorm, nn.RMSNorm)) or name == "bias" or id(param) in exempt
            (no_decay if skip else decay).append((full, param))
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, optim: OptimSection) -> torch.optim.AdamW:
    return torch.optim.AdamW(parameter_groups(model, optim.weight_decay), lr=optim.lr,
                             betas=(optim.betas[0], optim.betas[1]), eps=optim.eps)


def learning_rate(step: int, optim: OptimSection) -> float:
    """The rate for optimizer step `step` (0-based): linear warmup over warmup_steps to lr, then linear decay
    to 0 at max_steps."""
    if step < optim.warmup_steps:
        return optim.lr * (step + 1) / optim.warmup_steps
    remaining = optim.max_steps - step
    return optim.lr * max(0.0, remaining / max(1, optim.max_steps - optim.warmup_steps))


def schedule_state(step: int, optim: OptimSection) -> dict:
    """What a checkpoint records about the schedule (JSON)."""
    return {"name": "linear_warmup_linear_decay", "step": step, "base_lr": optim.lr,
            "warmup_steps": optim.warmup_steps, "max_steps": optim.max_steps,
            "next_lr": learning_rate(step, optim) if step < optim.max_steps else 0.0}
