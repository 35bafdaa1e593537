"""LAMB (You et al., "Large batch optimization for deep learning", 2019), as GPT-BERT trains with it.

Per parameter w with gradient g, at step t:

    m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
    u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)             Adam's step, bias-corrected
    u = u + wd w                                                    in a group with weight decay wd > 0
    w = w - lr x ratio x u,   ratio = ||w|| / ||u||  (1 if either is 0) in a group with wd > 0, else 1

so the trust ratio is applied to the decayed weights only: biases and norm gains (parameter_groups' second group)
take plain Adam steps, as in the authors' pretraining/lamb.py. With optim.weight_decay = 0 it is Adam.
The state is AdamW's (exp_avg, exp_avg_sq, step as a tensor), so checkpoints store it the same way.

By default each group's update runs on all its tensors at once (torch._foreach_*: a dozen kernels a step instead of
a dozen per tensor, what made a 12 x 384 GPT-BERT step launch-bound on a GPU: docs/results/training-speed.md);
foreach=False runs the per-tensor loop, the same arithmetic one tensor at a time, which the tests hold the
default to."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor


class Lamb(torch.optim.Optimizer):
    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.98),
                 eps: float = 1e-8, weight_decay: float = 0.0, foreach: bool = True) -> None:
        if not lr > 0:
            raise ValueError(f"Lamb: lr must be positive, got {lr}")
        if eps < 0:
            raise ValueError(f"Lamb: eps must be >= 0, got {eps}")
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"Lamb: betas must be in [0, 1), got {betas}")
        if weight_decay < 0:
            raise ValueError(f"Lamb: weight_decay must be >= 0, got {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.foreach = foreach

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if any(p.grad.is_sparse for p in params):
                raise RuntimeError("Lamb does not support sparse gradients")
            if self.foreach and len({(p.device, p.dtype) for p in params}) == 1:
                self._group_step(params, group)
                continue
            beta1, beta2 = group["betas"]
            decay = group["weight_decay"]
            for p in params:
                update = self._adam_update(p, group, beta1, beta2)
                if decay > 0:
                    update.add_(p, alpha=decay)
                    w_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
                    # no host synchronisation: the ratio stays a tensor
                    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                    update.mul_(ratio)
                p.add_(update, alpha=-group["lr"])
        return loss

    def _group_step(self, params: list[Tensor], group: dict[str, Any]) -> None:
        """The loop's arithmetic on every tensor of the group at once."""
        beta1, beta2 = group["betas"]
        decay = group["weight_decay"]
        states = [self._state_of(p) for p in params]
        torch._foreach_add_([state["step"] for state in states], 1)
        steps = [int(state["step"].item()) for state in states]  # CPU tensors: no device synchronisation
        grads = [p.grad for p in params]
        exp_avgs = [state["exp_avg"] for state in states]
        exp_avg_sqs = [state["exp_avg_sq"] for state in states]
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        denom = torch._foreach_div(exp_avg_sqs, [1 - beta2 ** t for t in steps])
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(exp_avgs, [1 - beta1 ** t for t in steps])
        torch._foreach_div_(update, denom)
        if decay > 0:
            torch._foreach_add_(update, params, alpha=decay)
            w_norm = torch.stack(torch._foreach_norm(params))
            u_norm = torch.stack(torch._foreach_norm(update))
            ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            torch._foreach_mul_(update, list(ratio.unbind()))
        torch._foreach_add_(params, update, alpha=-group["lr"])

    def _state_of(self, p: Tensor) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _adam_update(self, p: Tensor, group: dict[str, Any], beta1: float, beta2: float) -> Tensor:
        """Advance p's moments and return the bias-corrected Adam step m_hat / (sqrt(v_hat) + eps)."""
        state = self._state_of(p)
        state["step"] += 1
        t = int(state["step"].item())  # a CPU tensor: no device synchronisation
        exp_avg, exp_avg_sq, grad = state["exp_avg"], state["exp_avg_sq"], p.grad
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (exp_avg_sq / (1 - beta2 ** t)).sqrt_().add_(group["eps"])
        return (exp_avg / (1 - beta1 ** t)).div_(denom)
