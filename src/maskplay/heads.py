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


def linear_cross_entropy(x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                         chunk_bytes: int = 4 * 2**20) -> Tensor:
    """mean_n CE(x[n] @ weight.T + bias, targets[n]), equal to F.cross_entropy(F.linear(x, weight, bias), t).

    The (N, V) projection is the largest tensor of a training step, and on a CPU the passes over it (softmax,
    casts, the gradient) cost more than its matmuls. Here the logits are computed once in the input dtype; the
    softmax runs in fp32 over row chunks small enough to stay in cache (`chunk_bytes`), and each chunk's
    gradient (softmax - one-hot) is written back over its logits at once. The two gradient matmuls then read
    that buffer, still inside the forward pass: backward only scales the stored gradients. So there is one
    (N, V) buffer in the input dtype, not fp32 logits plus fp32 probabilities plus their gradient.
    A predicted probability below fp32's smallest normal (1e-38, a loss above 87 nats) is clamped there."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            return linear_cross_entropy(x.to(dtype), weight.to(dtype), bias.to(dtype), targets, chunk_bytes)
    if weight.dtype != x.dtype or bias.dtype != x.dtype:
        weight, bias = weight.to(x.dtype), bias.to(x.dtype)
    if not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or bias.requires_grad)):
        # evaluation: no gradient to fold in; log-softmax and the sum in fp32 (a bf16 F.cross_entropy would
        # round the summed loss to bf16)
        return -target_log_probs(F.linear(x, weight, bias), targets).sum() / targets.numel()
    chunk = max(1, chunk_bytes // (4 * weight.shape[0]))
    return _LinearCrossEntropy.apply(x, weight, bias, targets, chunk)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, chunk: int) -> Tensor:
        n = x.shape[0]
        if n == 0:
            raise ValueError("cross-entropy over zero target positions: no labels are set")
        need_grad = any(ctx.needs_input_grad[:3])
        buffer = torch.addmm(bias, x, weight.t())  # logits, then (in place) their gradient
        total = torch.zeros((), dtype=torch.float32, device=x.device)
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=x.device)
        for start in range(0, n, chunk):
            rows, ts = buffer[start:start + chunk], targets[start:start + chunk, None]
            probs = torch.softmax(rows, dim=-1, dtype=torch.float32)
            total -= probs.gather(1, ts).clamp_min_(torch.finfo(torch.float32).tiny).log_().sum()
            if need_grad:
                probs.scatter_add_(1, ts, torch.full_like(ts, -1, dtype=probs.dtype))  # softmax - one-hot
                grad_b += probs.sum(0)
                rows.copy_(probs)
        grads = (None, None, None)
        if need_grad:
            grad_x = (buffer @ weight).div_(n) if ctx.needs_input_grad[0] else None
            grad_w = (buffer.t() @ x).float().div_(n) if ctx.needs_input_grad[1] else None
            grads = (grad_x, grad_w, grad_b.div_(n) if ctx.needs_input_grad[2] else None)
        ctx.save_for_backward(*grads)
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


def target_log_probs(logits: Tensor, targets: Tensor, chunk_bytes: int = 4 * 2**20) -> Tensor:
    """log_softmax(logits)[n, targets[n]] in fp32, over row chunks small enough to stay in cache: no fp32 copy
    of the (N, V) logits and no (N, V) log-probabilities are ever held."""
    chunk = max(1, chunk_bytes // (4 * logits.shape[-1]))
    out = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
    for start in range(0, logits.shape[0], chunk):
        rows = torch.log_softmax(logits[start:start + chunk], dim=-1, dtype=torch.float32)
        out[start:start + chunk] = rows.gather(1, targets[start:start + chunk, None])[:, 0]
    return out
