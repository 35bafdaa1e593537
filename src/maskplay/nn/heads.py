"""BERT's masked-LM head, exactly: Dense -> GELU -> LayerNorm -> x @ E_tok^T + b, the decoder being the
token-embedding table itself (passed in, never copied) with a separate per-token bias. Where the embeddings
are narrower than the hidden size (config.embedding_size), the Dense maps hidden -> embedding width, as
HuggingFace ELECTRA's generator head and ALBERT's head do. GPT-BERT's switches: `head_norm` puts a norm in front of
the Dense (norm -> Dense -> GELU -> LayerNorm -> tied decoder + bias), `norm_affine = false` takes the learned gain
and bias off both norms. `lm_head = "tied" | "untied"`: a plain projection instead (PlainLMHead)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig


class LMHead(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_width)
        self.norm = nn.LayerNorm(config.embedding_width, eps=config.layer_norm_eps,
                                 elementwise_affine=config.norm_affine)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.pre_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps,
                                     elementwise_affine=config.norm_affine) if config.head_norm else None
        self.approximate = "tanh" if config.head_gelu_tanh else "none"  # ALBERT's gelu_new head

    def weight(self, embedding_weight: Tensor) -> Tensor:
        """The vocabulary projection's weight: BERT's head is tied to the word embeddings."""
        return embedding_weight

    def transform(self, hidden: Tensor) -> Tensor:
        if self.pre_norm is not None:
            hidden = self.pre_norm(hidden)
        return self.norm(F.gelu(self.dense(hidden), approximate=self.approximate))

    def forward(self, hidden: Tensor, embedding_weight: Tensor) -> Tensor:
        """Apply only to the positions being predicted: pass hidden[selected], not the whole sequence."""
        int8 = self._modules.get("int8_projection")  # an int8 copy's vocabulary projection (precision.quantize_int8)
        if int8 is not None:
            return int8(self.transform(hidden))
        return F.linear(self.transform(hidden), embedding_weight, self.bias)

    def loss(self, hidden: Tensor, embedding_weight: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy of the head's predictions at `hidden` (N, H) against `targets` (N,), without
        ever holding the (N, V) logits: see linear_cross_entropy. Under torch.compile, the plain form: the compiler
        fuses it itself, and it cannot trace linear_cross_entropy's autograd Function."""
        if torch.compiler.is_compiling():
            return F.cross_entropy(self(hidden, embedding_weight).float(), targets)
        return linear_cross_entropy(self.transform(hidden), embedding_weight, self.bias, targets)

    def loss_and_sample(self, hidden: Tensor, embedding_weight: Tensor, targets: Tensor,
                        uniforms: Tensor) -> tuple[Tensor, Tensor]:
        """loss(...) and one token per row sampled from the same predictions (linear_cross_entropy_and_sample)."""
        return linear_cross_entropy_and_sample(self.transform(hidden), embedding_weight, self.bias, targets, uniforms)

    def log_probs(self, hidden: Tensor, embedding_weight: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
        """log p(targets[n]) at `hidden[n]`, fp32, (N,): what scoring needs, without the (N, V) logits. A
        temperature divides the logits ((x W + b) / t = (x / t) W + b / t)."""
        x = self.transform(hidden)
        if temperature == 1.0:
            return linear_log_probs(x, embedding_weight, self.bias, targets)
        return linear_log_probs(x / temperature, embedding_weight, self.bias / temperature, targets)


class PlainLMHead(nn.Module):
    """lm_head = "tied" (GPT-2, OPT, tied LLaMA) or "untied" (GPT-NeoX, LLaMA): logits = h E^T, E the word
    embeddings, or h W^T with W its own (`decoder`), without BERT's transform and without a bias (a zero buffer, not
    saved, stands in for one: the chunked log-softmax and loss below take a bias). The interface is LMHead's."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False) if config.lm_head == "untied" \
            else None
        self.bias: Tensor
        self.register_buffer("bias", torch.zeros(config.vocab_size), persistent=False)

    def weight(self, embedding_weight: Tensor) -> Tensor:
        return embedding_weight if self.decoder is None else self.decoder.weight

    def transform(self, hidden: Tensor) -> Tensor:
        return hidden

    def forward(self, hidden: Tensor, embedding_weight: Tensor) -> Tensor:
        int8 = self._modules.get("int8_projection")  # an int8 copy's vocabulary projection (precision.quantize_int8)
        if int8 is not None:
            return int8(hidden)
        return F.linear(hidden, self.weight(embedding_weight))

    def loss(self, hidden: Tensor, embedding_weight: Tensor, targets: Tensor) -> Tensor:
        return linear_cross_entropy(hidden, self.weight(embedding_weight), self.bias, targets)

    def loss_and_sample(self, hidden: Tensor, embedding_weight: Tensor, targets: Tensor,
                        uniforms: Tensor) -> tuple[Tensor, Tensor]:
        return linear_cross_entropy_and_sample(hidden, self.weight(embedding_weight), self.bias, targets, uniforms)

    def log_probs(self, hidden: Tensor, embedding_weight: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
        weight = self.weight(embedding_weight)
        if temperature == 1.0:
            return linear_log_probs(hidden, weight, self.bias, targets)
        return linear_log_probs(hidden / temperature, weight, self.bias, targets)


def make_lm_head(config: ModelConfig) -> nn.Module:
    """The LM head config.lm_head names: BERT's (LMHead) or a plain projection (PlainLMHead)."""
    return LMHead(config) if config.lm_head == "mlm" else PlainLMHead(config)


# Rows of the vocabulary projection per matmul. On this project's CPU (AMD EPYC, AVX-512 BF16) oneDNN runs
# the (4096 x 256) @ (256 x 16384) bf16 product of a mini training step at ~480 GFLOP/s in one call and at
# ~920 in 256-row blocks; the (864 x 512) @ (512 x 29530) of a tta-paper scoring batch at 530 vs 780
# (benchmarks/probes/head_blocks.py). A block's logits are also still in cache for the softmax that reads them.
ROW_BLOCK = 256
# In fp32 the blocks are larger: there oneDNN ran the mini T-TA's (2048 x 256) @ (256 x 16384) product with its
# softmax at 147 ms in 1024-row blocks against 174 ms in 256-row ones (AMD EPYC, 2 cores; a block of fp32 logits is
# twice a bf16 one's bytes, so cache holds less of it anyway).
ROW_BLOCK_FP32 = 1024


@dataclass(frozen=True)
class Blocking:
    """How the loss and the scores walk the (N, V) logits: `rows` per vocabulary matmul (None: as many as
    `block_bytes` of logits hold, so that scoring many rows never holds more) and `chunk_bytes` of fp32 per softmax
    chunk."""

    rows: int | None
    chunk_bytes: int
    block_bytes: int = 2**30
    rows_fp32: int | None = None  # rows per matmul where the logits are fp32 (None: `rows`)


# A CPU wants blocks that stay in cache (above). A GPU wants few, large kernels: each launch costs about as much
# host time as a small kernel takes, and the CPU's blocking launched ~12 kernels per 64 rows, some 6,000 a step
# for a 12 x 384 GPT at 32 k tokens, more than all of its layers (docs/results/training-speed.md).
CPU_BLOCKING = Blocking(rows=ROW_BLOCK, chunk_bytes=4 * 2**20, rows_fp32=ROW_BLOCK_FP32)
GPU_BLOCKING = Blocking(rows=None, chunk_bytes=256 * 2**20)


def blocking(device: torch.device) -> Blocking:
    """The blocking for tensors on `device`."""
    return CPU_BLOCKING if device.type == "cpu" else GPU_BLOCKING


def _chunk_rows(chunk_bytes: int | None, x: Tensor, vocab: int) -> int:
    return max(1, (chunk_bytes or blocking(x.device).chunk_bytes) // (4 * vocab))


Projection = Callable[[int, Tensor], Tensor]  # (first row, rows of x) -> their logits


def _product(weight: Tensor, buffer: Tensor | None = None) -> Projection:
    """rows @ weight.T, written into `buffer`'s rows when given (so they can be overwritten)."""
    if buffer is None:
        return lambda start, rows_x: torch.mm(rows_x, weight.t())
    return lambda start, rows_x: torch.mm(rows_x, weight.t(), out=buffer[start:start + rows_x.shape[0]])


def _logit_chunks(x: Tensor, vocab: int, project: Projection, bias32: Tensor | None,
                  chunk: int) -> Iterator[tuple[int, Tensor, Tensor]]:
    """(first row, the logits rows as projected, their fp32 logits with the bias) for chunks of `chunk` rows, the
    logits computed blocking(device)'s rows per `project` call (the projection's rows are this loop's to change:
    fp32 rows get the bias in place, so both are then the same tensor). bias32 None: the projection adds its own
    bias (int8 scoring's, tasks.score.int8_head), and its fp32 rows are the logits."""
    policy = blocking(x.device)
    # fp32 rows: larger blocks, but not for a projection of its own (bias32 None: int8's, whose activations are
    # quantised per block of `rows`, tasks.score.int8_head)
    fp32 = policy.rows_fp32 is not None and x.dtype == torch.float32 and bias32 is not None
    block_rows = policy.rows_fp32 if fp32 else policy.rows
    step = block_rows or max(1, policy.block_bytes // (vocab * x.element_size()))
    for block_start in range(0, x.shape[0], step):
        block = project(block_start, x[block_start:block_start + step])
        for offset in range(0, block.shape[0], chunk):
            rows = block[offset:offset + chunk]
            if bias32 is None:
                yield block_start + offset, rows, rows
            elif rows.dtype == torch.float32:  # the block is this loop's own: the bias goes in place
                yield block_start + offset, rows, rows.add_(bias32)
            else:
                yield block_start + offset, rows, torch.add(rows, bias32)  # bf16 logits, the bias added in fp32


_SCRATCH = threading.local()  # per thread: two threads' losses must not share one buffer


def _scratch(shape: tuple[int, int], dtype: torch.dtype, device: torch.device) -> Tensor:
    """A reused buffer for the (N, V) logits of the fused loss, which live only inside its forward. A fresh
    one each step is a fresh mapping of ~130 MB (mini, 32 x 128 tokens) that the kernel must fault in and
    zero page by page; the one kept here is faulted in once. It grows to the largest batch seen."""
    need = shape[0] * shape[1]
    buffers = _SCRATCH.__dict__.setdefault("buffers", {})
    buffer = buffers.get((dtype, device))
    if buffer is None or buffer.numel() < need:
        buffers.pop((dtype, device), None)  # free the old one before the new one is allocated
        buffer = torch.empty(need, dtype=dtype, device=device)
        buffers[(dtype, device)] = buffer
    return buffer[:need].view(shape)


def linear_cross_entropy(x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                         chunk_bytes: int | None = None) -> Tensor:
    """mean_n CE(x[n] @ weight.T + bias, targets[n]), equal to F.cross_entropy(F.linear(x, weight, bias), t).

    The (N, V) projection is the largest tensor of a training step, and on a CPU the passes over it (softmax,
    casts, the gradient) cost more than its matmuls. Here the logits are computed once in the input dtype; the
    softmax runs in fp32 over row chunks (`chunk_bytes`; default the device's `blocking`: on a CPU small enough
    to stay in cache, on a GPU large, so that few kernels are launched), and each chunk's
    gradient (softmax - one-hot) is written back over its logits at once. The two gradient matmuls then read
    that buffer, still inside the forward pass: backward only scales the stored gradients. So there is one
    (N, V) buffer in the input dtype, not fp32 logits plus fp32 probabilities plus their gradient.
    A predicted probability below fp32's smallest normal (1e-38, a loss above 87 nats) is clamped there."""
    return linear_cross_entropy_and_sample(x, weight, bias, targets, None, chunk_bytes)[0]


def linear_cross_entropy_and_sample(x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                                    uniforms: Tensor | None, chunk_bytes: int | None = None) -> tuple[Tensor, Tensor]:
    """linear_cross_entropy, and with `uniforms` (N,) in [0, 1) one sample per row from the same softmax
    (temperature 1), drawn by inverse CDF in the chunk loop that computes the loss: ELECTRA's generator needs
    its loss and its samples from one pass over the (N, V) logits. The samples carry no gradient. Without
    `uniforms` the samples are an empty tensor."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            return linear_cross_entropy_and_sample(x.to(dtype), weight.to(dtype), bias.to(dtype), targets, uniforms,
                                                   chunk_bytes)
    if weight.dtype != x.dtype or bias.dtype != x.dtype:
        weight, bias = weight.to(x.dtype), bias.to(x.dtype)
    if uniforms is not None and uniforms.shape != targets.shape:
        raise ValueError(f"uniforms {tuple(uniforms.shape)} must have the shape of targets {tuple(targets.shape)}")
    if not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or bias.requires_grad)):
        # evaluation: no gradient to fold in; log-softmax and the sum in fp32 (a bf16 F.cross_entropy would
        # round the summed loss to bf16)
        log_probs, samples = _log_probs_and_samples(x, weight.shape[0], _product(weight), bias.float(), targets,
                                                    uniforms, chunk_bytes)
        return -log_probs.sum() / targets.numel(), samples
    return _LinearCrossEntropy.apply(x, weight, bias, targets, _chunk_rows(chunk_bytes, x, weight.shape[0]), uniforms)


def sample_rows(probs: Tensor, uniforms: Tensor) -> Tensor:
    """Inverse-CDF sampling, one index per row of `probs` (N, V): the first index whose cumulative probability
    exceeds uniforms[n] x the row's total (so rounding in the sum cannot push a draw past the end, and a token
    of probability 0 is never drawn)."""
    cdf = probs.float().cumsum(-1)
    drawn = torch.searchsorted(cdf, uniforms.float()[:, None] * cdf[:, -1:], right=True)[:, 0]
    return drawn.clamp_max_(probs.shape[-1] - 1)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, chunk: int,
                uniforms: Tensor | None) -> tuple[Tensor, Tensor]:
        n = x.shape[0]
        if n == 0:
            raise ValueError("cross-entropy over zero target positions: no labels are set")
        need_grad = any(ctx.needs_input_grad[:3])
        buffer = _scratch((n, weight.shape[0]), x.dtype, x.device)  # logits, then (in place) their gradient
        total = torch.zeros((), dtype=torch.float32, device=x.device)
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=x.device)
        samples = torch.empty(n if uniforms is not None else 0, dtype=torch.long, device=x.device)
        # the bias is added in fp32 on the way into the softmax: no separate pass over the logits
        for start, rows, logits in _logit_chunks(x, weight.shape[0], _product(weight, buffer), bias.float(), chunk):
            ts = targets[start:start + rows.shape[0], None]
            # fp32: the softmax over the logits in place (they are `rows`, the buffer's), so no copy back below
            probs = torch.ops.aten._softmax.out(logits, -1, False, out=logits) if logits is rows else \
                torch.softmax(logits, dim=-1)
            if uniforms is not None:
                samples[start:start + rows.shape[0]] = sample_rows(probs, uniforms[start:start + rows.shape[0]])
            total -= probs.gather(1, ts).clamp_min_(torch.finfo(torch.float32).tiny).log_().sum()
            if need_grad:
                probs.scatter_add_(1, ts, torch.full_like(ts, -1, dtype=probs.dtype))  # softmax - one-hot
                grad_b += probs.sum(0)
                if probs is not rows:
                    rows.copy_(probs)
        grads = (None, None, None)
        if need_grad:
            grad_x = (buffer @ weight).div_(n) if ctx.needs_input_grad[0] else None
            grad_w = (buffer.t() @ x).float().div_(n) if ctx.needs_input_grad[1] else None
            grads = (grad_x, grad_w, grad_b.div_(n) if ctx.needs_input_grad[2] else None)
        ctx.save_for_backward(*grads)
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype)
        ctx.mark_non_differentiable(samples)
        return total / n, samples

    @staticmethod
    def backward(ctx, grad_output: Tensor, _grad_samples: Tensor | None = None):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        dx, dw, db = ctx.dtypes
        return (
            None if grad_x is None else grad_x * grad_output.to(dx),
            None if grad_w is None else (grad_w * grad_output).to(dw),
            None if grad_b is None else (grad_b * grad_output).to(db),
            None,
            None,
            None,
        )


def linear_log_probs(x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                     chunk_bytes: int | None = None) -> Tensor:
    """log_softmax(x @ weight.T + bias)[n, targets[n]] in fp32, (N,). On a CPU the logits are computed ROW_BLOCK
    rows at a time and the log-softmax over row chunks small enough to stay in cache (`chunk_bytes` of fp32), so
    no (N, V) tensor is ever held: memory stays flat however many positions are scored. On a GPU, in blocks of
    up to 1 GiB of logits and 256 MiB chunks (`blocking`): few kernels, and still a bound on memory."""
    if weight.dtype != x.dtype or bias.dtype != x.dtype:
        weight, bias = weight.to(x.dtype), bias.to(x.dtype)
    return _log_probs_and_samples(x, weight.shape[0], _product(weight), bias.float(), targets, None, chunk_bytes)[0]


def projected_log_probs(x: Tensor, project: Callable[[Tensor], Tensor], vocab: int, targets: Tensor,
                        chunk_bytes: int | None = None) -> Tensor:
    """linear_log_probs for a projection of its own that adds its bias and returns fp32 logits (int8 scoring's,
    tasks.score.int8_head): the same blocks, chunks and fp32 log-softmax."""
    return _log_probs_and_samples(x, vocab, lambda start, rows_x: project(rows_x), None, targets, None,
                                  chunk_bytes)[0]


def _log_probs_and_samples(x: Tensor, vocab: int, project: Projection, bias32: Tensor | None, targets: Tensor,
                           uniforms: Tensor | None, chunk_bytes: int | None) -> tuple[Tensor, Tensor]:
    chunk = _chunk_rows(chunk_bytes, x, vocab)
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    samples = torch.empty(x.shape[0] if uniforms is not None else 0, dtype=torch.long, device=x.device)
    for start, rows, logits in _logit_chunks(x, vocab, project, bias32, chunk):
        end = start + rows.shape[0]
        log_softmax = torch.log_softmax(logits, dim=-1)
        out[start:end] = log_softmax.gather(1, targets[start:end, None])[:, 0]
        if uniforms is not None:
            samples[start:end] = sample_rows(log_softmax.exp(), uniforms[start:end])
    return out, samples
