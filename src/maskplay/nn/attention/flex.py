"""FlexAttention (torch.nn.attention.flex_attention) for attention under a materialised mask, where SDPA cannot use
its flash kernels: T-TA's no-diagonal mask, GPT-BERT's batches of causal and masked rows, UniLM's, padding in a
bidirectional batch, XLNet's two streams, and the position terms of disentangled attention (attention/disentangled.py)
and of Transformer-XL and XLNet (positions.RelativePositions, with XLNet's segment term), each a score_mod. The
mask is read inside the kernel as a block mask (mask_mod) instead of as the additive bias SDPA's memory-efficient
kernel takes, and a score_mod adds its terms there, so no (B, heads, Lq, Lk) tensor is written, read, kept for the
backward or scattered back.

Switched on for a run by run.flex_attention (`using`); the same values as the SDPA path. Compiled on a CUDA device
(FlexAttention's fused kernels); on a CPU torch's FlexAttention has no backward (torch 2.13), so it runs there only
without gradients, eagerly (slow: for tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
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


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, score_mod: ScoreMod | None = None,
           scale: float | None = None) -> Tensor:
    """softmax(scale q k^T + terms) v where mask, (B, heads, Lq, dv); q (B, heads, Lq, d), k and v (B, heads, Lk,
    d), mask (1 or B, 1 or heads, Lq, Lk) boolean (True = may attend), score_mod(score, b, h, i, j) the scaled score
    with its terms added. A row that may attend to nothing gets zeros (SDPA's gives nan; the callers zero such rows
    anyway)."""
    global _compiled, _last_block_mask
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    on_gpu = q.device.type == "cuda"
    if not on_gpu and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ValueError("FlexAttention trains on a CUDA device only (torch's CPU FlexAttention has no backward); "
                         "set run.flex_attention = false here")
    B, heads, Lq, Lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    batch_mask, head_mask = mask.shape[0] > 1, mask.shape[1] > 1

    def mask_mod(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        return mask[b if batch_mask else 0, h if head_mask else 0, i, j]

    # a pass builds its mask once and hands the same tensor to every layer: the block mask is made again for another
    # tensor, or for this one written in place since (its version counter moved)
    if _last_block_mask is None or _last_block_mask[0] is not mask or _last_block_mask[1] != mask._version:
        block = create_block_mask(mask_mod, B if batch_mask else None, heads if head_mask else None, Lq, Lk,
                                  device=q.device, _compile=on_gpu)
        _last_block_mask = (mask, mask._version, block)
    if on_gpu:
        _compiled = _compiled or torch.compile(flex_attention, dynamic=False)
        kernel = _compiled
    else:
        kernel = flex_attention
    if not on_gpu:  # under torch.compile, the CPU's FlexAttention template reads q's buffer as 4-D, not a view of a
        q = q.contiguous()  # linear's 2-D output (an InductorError at lowering, torch 2.13); a GPU's reads strides
    return kernel(q, k, v, score_mod=score_mod, block_mask=_last_block_mask[2], scale=scale)
