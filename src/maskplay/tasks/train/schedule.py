"""The optimizer (AdamW, or LAMB: lamb.py) over BERT's weight-decay parameter groups, and the learning-rate
schedule (linear, or GPT-BERT's cosine with a cooldown).

The rate is a pure function of the step, so a resumed run needs nothing but the step to continue it."""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import OptimSection
from .lamb import Lamb


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


def build_optimizer(model: nn.Module, optim: OptimSection) -> torch.optim.Optimizer:
    """optim.optimizer over parameter_groups: AdamW, or LAMB (its trust ratio on the decayed group only)."""
    groups = parameter_groups(model, optim.weight_decay)
    betas = (optim.betas[0], optim.betas[1])
    if optim.optimizer == "lamb":
        return Lamb(groups, lr=optim.lr, betas=betas, eps=optim.eps)
    # the fused kernel updates every tensor in one pass over its states: 39 -> 6 ms a step for the two-hour model's
    # 7.4 M parameters on one core (the for-loop was 4.5 % of its step; benchmarks/probes/adamw_kinds.py); CPU and CUDA
    # have it
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for g in groups for _, p in g["params"])
    return torch.optim.AdamW(groups, lr=optim.lr, betas=betas, eps=optim.eps, fused=fused)


def learning_rate(step: int, optim: OptimSection) -> float:
    """The rate for optimizer step `step` (0-based): optim.schedule's."""
    if optim.schedule == "cosine-cooldown":
        return cosine_cooldown_rate(step, optim)
    if step < optim.warmup_steps:
        return optim.lr * (step + 1) / optim.warmup_steps
    remaining = optim.max_steps - step
    return optim.lr * max(0.0, remaining / max(1, optim.max_steps - optim.warmup_steps))


def cosine_cooldown_rate(step: int, optim: OptimSection) -> float:
    """GPT-BERT's schedule, for step s of T = max_steps with W warmup and C cooldown steps and floor r:
    lr x (s + 1) / W while s < W (the linear schedule's warmup); then lr x (r + (1 - r) x (1 + cos(pi p)) / 2),
    p = (s - W) / (T - C - W), falling from lr to r x lr at s = T - C; then lr x r x (T - s) / C, linear to 0
    at T. (The authors' p runs over T - W, so their cosine is a hair above r where the cooldown starts.)"""
    lr, r = optim.lr, optim.min_lr_ratio
    warmup, cooldown, total = optim.warmup_steps, optim.cooldown_steps, optim.max_steps
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= total:
        return 0.0
    if step >= total - cooldown:
        return lr * r * (total - step) / cooldown
    progress = (step - warmup) / max(1, total - cooldown - warmup)
    return lr * (r + (1 - r) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def schedule_state(step: int, optim: OptimSection) -> dict:
    """What a checkpoint records about the schedule (JSON)."""
    extra = ({"name": "cosine_warmup_cooldown", "cooldown_steps": optim.cooldown_steps,
              "min_lr_ratio": optim.min_lr_ratio} if optim.schedule == "cosine-cooldown" else {})
    return {"name": "linear_warmup_linear_decay", "step": step, "base_lr": optim.lr,
            "warmup_steps": optim.warmup_steps, "max_steps": optim.max_steps,
            "next_lr": learning_rate(step, optim) if step < optim.max_steps else 0.0, **extra}
