"""LAMB (You et al., "Large batch optimization for deep learning", 2019), as GPT-BERT trains with it.

Per parameter w with gradient g, at step t:

    m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
    u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)             Adam's step, bias-corrected
    u = u + wd w                                                    in a group with weight decay wd > 0
    w = w - lr x ratio x u,   ratio = ||w|| / ||u||  (1 if either is 0) in a group with wd > 0, else 1

so the trust ratio is applied to the decayed weights only: biases and norm gains (parameter_groups' second group)
take plain Adam steps, as in the authors' pretraining/lamb.py. With optim.weight_decay = 0 it is Adam.
The state is AdamW's (exp_avg, exp_avg_sq, step as a tensor), so checkpoints store it the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor


class Lamb(torch.optim.Optimizer):
    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.98),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        if not lr > 0:
            raise ValueError(f"Lamb: lr must be positive, got {lr}")
        if eps < 0:
            raise ValueError(f"Lamb: eps must be >= 0, got {eps}")
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"Lamb: betas must be in [0, 1), got {betas}")
        if weight_decay < 0:
            raise ValueError(f"Lamb: weight_decay must be >= 0, got {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            decay = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                update = self._adam_update(p, group, beta1, beta2)
                if decay > 0:
                    update.add_(p, alpha=decay)
                    w_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
                    # no host synchronisation: the ratio stays a tensor
                    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                    update.mul_(ratio)
                p.add_(update, alpha=-group["lr"])
        return loss

    def _adam_update(self, p: Tensor, group: dict[str, Any], beta1: float, beta2: float) -> Tensor:
        """Advance p's moments and return the bias-corrected Adam step m_hat / (sqrt(v_hat) + eps)."""
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        t = int(state["step"].item())  # a CPU tensor: no device synchronisation
        exp_avg, exp_avg_sq, grad = state["exp_avg"], state["exp_avg_sq"], p.grad
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (exp_avg_sq / (1 - beta2 ** t)).sqrt_().add_(group["eps"])
        return (exp_avg / (1 - beta1 ** t)).div_(denom)
