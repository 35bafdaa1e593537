"""DenseFormer's depth-weighted averages (Pagliardini et al. 2024; `denseformer = true`), as GPT-BERT uses them: after
sub-layer n of S (attention and feed-forward of every block, n = 0..S-1) the stream becomes
x = sum_j alpha_n[j] x_j over x_0, the embedding output, and x_1..x_{n+1}, the sub-layer outputs so far (x_{n+1} the
one just computed, residual included). alpha_n (n + 2 weights) starts at (0, ..., 0, 1): the plain residual stream,
exactly. Position by position, so it runs on any layout (packed, PLL's rows, a cache's new tokens).

A pass keeps its states in a stream (`DepthWeights.stream`). Every weighted sum reads all earlier states, so written
naively a step costs O(S^2) kernels and copies; two streams keep that down:

- `BufferedStream` (a pass that may train, eagerly): the states live in one (S + 1, ...) buffer, each written once, and
  every weighted sum is one matrix-vector product over a slice of it. Its backward keeps the gradient of its output
  in a second buffer and hands autograd the gradient of its own new state only, one matrix-vector product over the
  gradients of the sums that read that state (all known by then: every later weighted sum runs its backward first,
  being downstream). So autograd accumulates nothing: the list stream's O(S^2) accumulations and stacked copies
  become one kernel a sum, and each gradient is read where it is needed, not added into every earlier state's
  gradient at every sum (an outer-product update before commit 0eaa0a1: three times the memory traffic). The weights'
  gradients come all at once from the first sum's backward, the last to run: one product of the states and the
  sums' gradients, each read once, where a matrix-vector product a sum read every earlier state again.
- `ListStream` (under torch.compile's whole-step scope, which cannot trace a buffer written in a backward, and for
  PLL's last-layer rows, which re-gather the states): a list, each sum over the states stacked for the moment
  (`_WeightedSum`; without gradients the same sum outside it, which torch.compile traces there).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable


class DepthWeights(nn.Module):
    """The weights alpha_0..alpha_{S-1} of DenseFormer's averages (alpha_n has n + 2 entries), identity-initialised."""

    def __init__(self, sublayers: int) -> None:
        super().__init__()
        self.alphas = nn.ParameterList(nn.Parameter(torch.zeros(n + 2)) for n in range(sublayers))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for alpha in self.alphas:
                alpha.zero_()
                alpha[-1] = 1.0

    def no_weight_decay(self) -> list[nn.Parameter]:
        """Identity-initialised: weight decay would pull them towards zero, not towards the plain residual."""
        return list(self.alphas)

    def forward(self, states: list[Tensor], n: int) -> Tensor:
        """The weighted sum after sub-layer n of `states` (x_0..x_{n+1})."""
        alpha = self.alphas[n].to(states[-1].dtype)
        if not torch.is_grad_enabled():  # the Function only shapes the backward, and torch.compile cannot trace
            return _weighted_sum(alpha, states)  # it under no_grad (a graph break at every sum, torch 2.13)
        return _WeightedSum.apply(alpha, *states)

    def stream(self, x0: Tensor, buffered: bool) -> ListStream | BufferedStream:
        """A pass's stream starting at x0: buffered (one buffer, one kernel a sum forward and backward) or a list."""
        return BufferedStream(self, x0) if buffered else ListStream(self, x0)


class ListStream:
    """The states as a list; `add` appends a sub-layer's output and returns the stream's next value."""

    def __init__(self, weights: DepthWeights, x0: Tensor) -> None:
        self.weights, self.states = weights, [x0]

    def add(self, x: Tensor) -> Tensor:
        self.states.append(x)
        return self.weights(self.states, len(self.states) - 2)

    def rows(self, at: tuple[Tensor, Tensor]) -> None:
        """Keep one position per row of every state (the last block at PLL's rows: (B, 1, H) states)."""
        self.states = [x[at][:, None] for x in self.states]


class BufferedStream:
    """The states in one buffer (see the module's docstring). The buffer's values are written outside autograd; each
    weighted sum hands autograd its own new state (and the first one x_0) and keeps the rest to itself."""

    def __init__(self, weights: DepthWeights, x0: Tensor) -> None:
        self.weights, self.first, self.added = weights, x0, 0
        sums = len(weights.alphas)
        self.values = x0.new_empty((sums + 1, *x0.shape))
        self.alphas = x0.new_zeros((sums, sums + 1))  # row n: the weights sum n used (x_0..x_{n+1}), zeros after
        # each sum's output gradient: made at the first backward, dropped after the last (retain_graph reruns)
        self.out_grads: Tensor | None = None
        self.reached = [False] * sums  # which sums ran a backward (a loss on a middle layer stops short of the rest)

    def add(self, x: Tensor) -> Tensor:
        """x_{n+1}; the stream's next value. The first sum takes every alpha as its input: its backward, the last
        to run, gives all their gradients at once."""
        n = self.added
        self.added += 1
        if n == 0:
            return _BufferedSum.apply(x, self.first, self, 0, *(alpha.to(x.dtype) for alpha in self.weights.alphas))
        return _BufferedSum.apply(x, None, self, n)

    def rows(self, at: tuple[Tensor, Tensor]) -> None:
        raise ValueError("a buffered DenseFormer stream keeps every position: PLL's last-layer rows take the list one")


class _BufferedSum(torch.autograd.Function):
    """sum_j alpha_n[j] x_j over the stream's buffer, x_{n+1} = `new` written into it first (and x_0 = `first` when
    n = 0, which also takes every alpha: `alphas`). In the states' own precision (not autocast's: the residual stream
    stays as wide as it is)."""

    @staticmethod
    def forward(ctx, new: Tensor, first: Tensor | None, stream: BufferedStream, n: int,  # noqa: ANN001
                *alphas: Tensor) -> Tensor:
        if first is not None:  # the first sum: x_0, and every sum's weights (read by the later sums and backwards)
            stream.values[0].copy_(first)
            for m, a in enumerate(alphas):
                stream.alphas[m, : m + 2].copy_(a.detach())
        stream.values[n + 1].copy_(new)
        alpha = stream.alphas[n, : n + 2]
        ctx.stream, ctx.n = stream, n
        with torch.autocast(new.device.type, enabled=False):
            return torch.tensordot(alpha, stream.values[: n + 2], dims=1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # noqa: ANN001
        stream, n = ctx.stream, ctx.n
        if stream.out_grads is None:  # zeros: a sum whose output reached no loss runs no backward
            stream.out_grads = grad.new_zeros((len(stream.alphas), *grad.shape))
        stream.out_grads[n].copy_(grad)
        stream.reached[n] = True
        later = stream.out_grads[n:].flatten(1)  # the gradients of sum n and of every sum after it
        with torch.autocast(grad.device.type, enabled=False):
            # x_{n+1} is read by sums n..S-1, with weights alphas[n:, n + 1]; x_0 (at n = 0) by all, alphas[:, 0]
            grad_new = later.t().mv(stream.alphas[n:, n + 1]).view(grad.shape)
            if n > 0:
                return grad_new, None, None, None
            grad_first = later.t().mv(stream.alphas[:, 0]).view(grad.shape)
            # every alpha's gradient at once, d loss / d alpha_m[j] = x_j . g_m: one product of the states and the
            # sums' gradients, each read once (not every earlier state again at every sum)
            ran = stream.added
            gram = stream.values[: ran + 1].flatten(1) @ stream.out_grads[:ran].flatten(1).t()  # (ran + 1, ran)
            grad_alphas = [gram[: m + 2, m].contiguous() if m < ran and stream.reached[m] and ctx.needs_input_grad[4 + m]
                           else None for m in range(len(stream.alphas))]
        # the last to run: a second backward through a retained graph starts from zeros
        stream.out_grads, stream.reached = None, [False] * len(stream.alphas)
        return grad_new, grad_first, None, None, *grad_alphas


def _weighted_sum(alpha: Tensor, states: list[Tensor] | tuple[Tensor, ...]) -> Tensor:
    with torch.autocast(states[0].device.type, enabled=False):
        return torch.tensordot(alpha, torch.stack(states), dims=1)


class _WeightedSum(torch.autograd.Function):
    """sum_j alpha[j] x_j as one matrix-vector product over the states stacked for the moment, and its backward as
    three kernels (stack, matrix-vector, outer product). In the states' own precision, as _BufferedSum."""

    @staticmethod
    def forward(ctx, alpha: Tensor, *states: Tensor) -> Tensor:  # noqa: ANN001
        ctx.save_for_backward(alpha, *states)
        return _weighted_sum(alpha, states)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # noqa: ANN001
        alpha, *states = ctx.saved_tensors
        with torch.autocast(grad.device.type, enabled=False):
            grad_alpha = torch.stack(states).flatten(1).mv(grad.flatten()) if ctx.needs_input_grad[0] else None
            shares = torch.outer(alpha, grad.flatten()).view(len(states), *grad.shape)
        return (grad_alpha, *shares.unbind(0))
