"""FlexAttention (torch.nn.attention.flex_attention) for attention under a materialised mask, where SDPA cannot use
its flash kernels: T-TA's no-diagonal mask, GPT-BERT's batches of causal and masked rows, UniLM's, padding in a
bidirectional batch, XLNet's two streams, and the position terms of disentangled attention (attention/disentangled.py)
and of Transformer-XL and XLNet (positions.RelativePositions, with XLNet's segment term), each a score_mod. The
mask is read inside the kernel as a block mask (mask_mod) instead of as the additive bias SDPA's memory-efficient
kernel takes, and a score_mod adds its terms there, so no (B, heads, Lq, Lk) tensor is written, read, kept for the
backward or scattered back.

Switched on for a run by run.flex_attention (`using`); the same values as the SDPA path. Compiled on a CUDA device
(FlexAttention's fused kernels); on a CPU torch's FlexAttention has no backward (torch 2.13), so it runs there only
without gradients, eagerly (slow: for tests). Inside a compiled step (run.compile) the block mask is made in the
graph from the mask itself (block_mask_of), so FlexAttention compiles with the rest of the step, in one graph."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

enabled = False  # run.flex_attention: attention under a materialised mask goes through FlexAttention

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

_compiled: Callable[..., Tensor] | None = None
# (a mask, its version, its block mask): every layer of a pass shares one mask
_last_block_mask: tuple[Tensor, int, object] | None = None


@contextmanager
def using(on: bool) -> Iterator[None]:
    """`enabled` set to `on` inside the block (one run's run.flex_attention), and back after it."""
    global enabled, _last_block_mask
    before, enabled = enabled, bool(on)
    try:
        yield
    finally:
        enabled, _last_block_mask = before, None


def block_mask_of(mask: Tensor, block: int = 128):
    """A FlexAttention BlockMask for a materialised boolean mask (1 or B, 1 or heads, Lq, Lk), made from the mask
    itself with a few reductions over its blocks: a block with no pair that may attend is left out, one whose pairs
    all may is full (the kernel does not read the mask there), the rest are partial (the mask_mod reads it).
    create_block_mask finds the same blocks by evaluating the mask_mod at all Lq x Lk pairs through vmap, which
    dynamo cannot trace inside a compiled step (a graph break at every layer); these are plain tensor operations of
    static shapes, so a compiled step makes its block mask in its graph."""
    from torch.nn.attention.flex_attention import BlockMask

    B, H, Lq, Lk = mask.shape
    nq, nk = -(-Lq // block), -(-Lk // block)
    # the padding past the last block's edge may not attend: an edge block is never full
    blocks = F.pad(mask, (0, nk * block - Lk, 0, nq * block - Lq)).view(B, H, nq, block, nk, block)
    listed, full = blocks.any(5).any(3), blocks.all(5).all(3)
    partial = listed & ~full

    def table(which: Tensor) -> tuple[Tensor, Tensor]:  # each query block's count, and its blocks listed first
        return (which.sum(-1, dtype=torch.int32),
                (~which).to(torch.int8).argsort(dim=-1, stable=True).to(torch.int32))

    def mask_mod(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        # the kernel may ask at indices up to a multiple of the block: those read pair (0, 0) and are hidden
        inside = (i < Lq) & (j < Lk)
        return inside & mask[b if B > 1 else 0, h if H > 1 else 0, torch.where(i < Lq, i, 0),
                             torch.where(j < Lk, j, 0)]

    (counts, indices), (full_counts, full_indices) = table(partial), table(full)
    return BlockMask.from_kv_blocks(counts, indices, full_counts, full_indices, BLOCK_SIZE=block, mask_mod=mask_mod,
                                    seq_lengths=(Lq, Lk))


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, score_mod: ScoreMod | None = None,
           scale: float | None = None) -> Tensor:
    """softmax(scale q k^T + terms) v where mask, (B, heads, Lq, dv); q (B, heads, Lq, d), k and v (B, heads, Lk,
    d), mask (1 or B, 1 or heads, Lq, Lk) boolean (True = may attend), score_mod(score, b, h, i, j) the scaled score
    with its terms added. A row that may attend to nothing gets zeros (SDPA's gives nan; the callers zero such rows
    anyway)."""
    global _compiled, _last_block_mask
    from torch.nn.attention.flex_attention import flex_attention

    on_gpu = q.device.type == "cuda"
    if not on_gpu and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ValueError("FlexAttention trains on a CUDA device only (torch's CPU FlexAttention has no backward); "
                         "set run.flex_attention = false here")
    if not on_gpu:  # under torch.compile, the CPU's FlexAttention template reads q's buffer as 4-D, not a view of a
        q = q.contiguous()  # linear's 2-D output (an InductorError at lowering, torch 2.13); a GPU's reads strides
    if torch.compiler.is_compiling():
        # inside a compiled step: the block mask made in the graph at every layer (a few reductions of the mask,
        # which inductor may share), and FlexAttention compiled with the rest of the step
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask_of(mask), scale=scale)
    # eagerly, a pass builds its mask once and hands the same tensor to every layer: the block mask is made again
    # for another tensor, or for this one written in place since (its version counter moved)
    if _last_block_mask is None or _last_block_mask[0] is not mask or _last_block_mask[1] != mask._version:
        _last_block_mask = (mask, mask._version, block_mask_of(mask))
    if on_gpu:
        _compiled = _compiled or torch.compile(flex_attention, dynamic=False)
        kernel = _compiled
    else:
        kernel = flex_attention
    return kernel(q, k, v, score_mod=score_mod, block_mask=_last_block_mask[2], scale=scale)
