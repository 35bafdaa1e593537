"""BERT's masked-LM head, exactly: Dense -> GELU -> LayerNorm -> x @ E_tok^T + b, the decoder being the
token-embedding table itself (passed in, never copied) with a separate per-token bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig


class LMHead(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def transform(self, hidden: Tensor) -> Tensor:
        return self.norm(F.gelu(self.dense(hidden)))

    def forward(self, hidden: Tensor, embedding_weight: Tensor) -> Tensor:
        """Apply only to the positions being predicted: pass hidden[selected], not the whole sequence."""
        return F.linear(self.transform(hidden), embedding_weight, self.bias)

    def loss(self, hidden: Tensor, embedding_weight: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy of the head's predictions at `hidden` (N, H) against `targets` (N,), without
        ever holding the (N, V) logits: see linear_cross_entropy."""
        return linear_cross_entropy(self.transform(hidden), embedding_weight, self.bias, targets)


def linear_cross_entropy(x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, chunk: int = 1024) -> Tensor:
    """mean_n CE(x[n] @ weight.T + bias, targets[n]), equal to F.cross_entropy(F.linear(x, weight, bias), t).

    The vocabulary projection is the largest tensor of the step ((N, V): 270 MB in fp32 for 4096 tokens and
    16k pieces). It is computed in row chunks, and the gradient of each chunk (softmax - one-hot) is folded
    into grad_x / grad_weight right away, during the forward pass, so the logits are never stored and never
    recomputed; backward only scales the stored gradients. Log-sum-exp runs in fp32 whatever the dtype."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            return linear_cross_entropy(x.to(dtype), weight.to(dtype), bias.to(dtype), targets, chunk)
    if weight.dtype != x.dtype or bias.dtype != x.dtype:
        weight, bias = weight.to(x.dtype), bias.to(x.dtype)
    return _LinearCrossEntropy.apply(x, weight, bias, targets, chunk)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, chunk: int) -> Tensor:
        n = x.shape[0]
        if n == 0:
            raise ValueError("cross-entropy over zero target positions: no labels are set")
        need_grad = ctx.needs_input_grad[:3]
        total = torch.zeros((), dtype=torch.float32, device=x.device)
        grad_x = torch.empty_like(x) if need_grad[0] else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=x.device) if need_grad[1] else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=x.device) if need_grad[2] else None
        for start in range(0, n, chunk):
            xs, ts = x[start:start + chunk], targets[start:start + chunk, None]
            logits = torch.addmm(bias, xs, weight.t()).float()
            lse = torch.logsumexp(logits, dim=-1, keepdim=True)
            total += (lse - logits.gather(1, ts)).sum()
            if not any(need_grad):
                continue
            probs = logits.sub_(lse).exp_()
            probs.scatter_add_(1, ts, torch.full_like(ts, -1, dtype=probs.dtype))
            probs.div_(n)
            if grad_b is not None:
                grad_b += probs.sum(0)
            probs = probs.to(x.dtype)
            if grad_x is not None:
                torch.mm(probs, weight, out=grad_x[start:start + chunk])
            if grad_w is not None:
                grad_w += (probs.t() @ xs).float()
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype)
        return total / n

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        dx, dw, db = ctx.dtypes
        return (
            None if grad_x is None else grad_x * grad_output.to(dx),
            None if grad_w is None else (grad_w * grad_output).to(dw),
            None if grad_b is None else (grad_b * grad_output).to(db),
            None,
            None,
        )
