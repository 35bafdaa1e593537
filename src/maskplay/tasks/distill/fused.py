"""The distillation loss (loss.distill_loss) fused with the student's LM-head projection: the (N, V) logits are
computed a few rows at a time, their softmax, loss and gradient taken at once, and the gradients of the projection's
inputs accumulated inside the forward pass (as heads.linear_cross_entropy does for pretraining), so no (N, V)
tensor outlives its chunk and backward only scales the stored gradients.

Per row, with z the logits, q_T = softmax(z / T), p the teacher's renormalised top-k at T and w the CE weight,
d loss / d z = (1 - w) T (q_T - p) + w (softmax(z) - onehot(real)) (p scattered onto the vocabulary)."""

from __future__ import annotations

import torch
from torch import Tensor

ROWS = 64  # rows of logits per chunk: 64 x a 30k vocabulary in fp32 is 7.5 MB


def fused_distill_loss(x: Tensor, weight: Tensor, bias: Tensor, top_ids: Tensor, top_logprobs: Tensor, real: Tensor,
                       temperature: float = 1.0, ce_weight: float = 0.0) -> tuple[Tensor, dict[str, Tensor]]:
    """distill_loss(x @ weight.T + bias, ...) for x (N, E) the head's transformed hidden states, weight (V, E) the
    tied decoder, bias (V,); returns (the loss, {"kl", "ce"} detached means)."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            return fused_distill_loss(x.to(dtype), weight.to(dtype), bias, top_ids, top_logprobs, real, temperature,
                                      ce_weight)
    if weight.dtype != x.dtype:
        weight = weight.to(x.dtype)
    out = _FusedDistill.apply(x, weight, bias, top_ids.long(), top_logprobs.float(), real.long(), temperature,
                              ce_weight)
    return out[0], {"kl": out[1].detach(), "ce": out[2].detach()}


class _FusedDistill(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, top_ids: Tensor, top_logprobs: Tensor, real: Tensor,
                t: float, w: float) -> Tensor:
        n = x.shape[0]
        if n == 0:
            raise ValueError("distillation over zero target positions")
        need = ctx.needs_input_grad[:3]
        p = torch.softmax(top_logprobs / t, dim=-1)
        p_log_p = (p * torch.log_softmax(top_logprobs / t, dim=-1)).sum(-1)
        kl = torch.zeros((), dtype=torch.float32, device=x.device)
        ce = torch.zeros((), dtype=torch.float32, device=x.device)
        grad_x = torch.empty(x.shape, dtype=torch.float32, device=x.device) if need[0] else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=x.device) if need[1] else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=x.device) if need[2] else None
        for s in range(0, n, ROWS):
            e = min(n, s + ROWS)
            z = torch.mm(x[s:e], weight.t()).float() + bias.float()
            log_q = torch.log_softmax(z / t, dim=-1)
            kl += (p_log_p[s:e] - (p[s:e] * log_q.gather(1, top_ids[s:e])).sum(-1)).sum()
            log_q1 = log_q if t == 1 else torch.log_softmax(z, dim=-1)
            ce -= log_q1.gather(1, real[s:e, None]).sum()
            if not any(need):
                continue
            q = log_q.exp()
            if w > 0 and t == 1:  # both terms' softmax is q
                g = q.mul_((1 - w) * t + w)
            else:
                g = q.mul_((1 - w) * t)
                if w > 0:
                    g.add_(log_q1.exp(), alpha=w)
            g.scatter_add_(1, top_ids[s:e], p[s:e] * -((1 - w) * t))
            if w > 0:
                g.scatter_add_(1, real[s:e, None], torch.full((e - s, 1), -w, device=x.device))
            if grad_x is not None:
                grad_x[s:e] = g.to(weight.dtype) @ weight
            if grad_w is not None:
                grad_w += g.t() @ x[s:e].float()
            if grad_b is not None:
                grad_b += g.sum(0)
        loss = ((1 - w) * t * t * kl + w * ce) / n
        ctx.save_for_backward(*(None if v is None else v.div_(n) for v in (grad_x, grad_w, grad_b)))
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype)
        return torch.stack([loss, kl / n, ce / n])

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        dx, dw, db = ctx.dtypes
        scale = grad_output[0]
        return (None if grad_x is None else (grad_x * scale).to(dx), None if grad_w is None else (grad_w * scale).to(dw),
                None if grad_b is None else (grad_b * scale).to(db), None, None, None, None, None)
