"""Reformer's three memory savers (Kitaev et al., ICLR 2020): LSH attention, reversible residual layers, chunked
feed-forward.

LSH attention (``lsh_attention``): queries and keys share one projection (shared QK; keys are the unit-length
copies). Each of `n_hashes` rounds hashes every position by a random rotation (angular LSH: the bucket is the
argmax of [xR, -xR]), sorts positions by (bucket, position), cuts the sorted order into chunks of `chunk`, and
lets each chunk attend to itself and to the chunk before it (the first to the last), within the same bucket unless
`attend_across_buckets`. Rounds are combined by their log-sum-exp with each pair's score lowered by log(number of
rounds that hold it), as trax does, so the result is exactly softmax attention over the union of the rounds'
candidates (tests/nn/test_reformer.py holds it to dense attention under that union mask). The family mask is a hard
mask on top: under T-TA's ``no_diagonal()`` a token never attends to itself, and a row with nothing left gives
zeros. Reformer's own rule, that a token attends to itself only when nothing else is available (its score is
-1e5 instead of -inf), is the separate switch `exclude_self`.

T-TA's queries must not be built from token i (families/tta.py): pass them as `query` (scores q_i . k_j) while
`qk` (the keys) does the hashing. The gradient of output i with respect to token i is then zero, but LSH routing
is not leak-free under T-TA: query i is routed to the keys sharing the bucket of position i, and that bucket is a
hash of token i's own key, so output i depends on token i through which keys it sees (a discrete dependence, no
gradient). tests/nn/test_reformer.py shows both facts.

Reversible residual layers (``ReversibleSequence``): y1 = x1 + F(x2), y2 = x2 + G(y1). The forward keeps no
activations; backward reconstructs each block's inputs from its outputs (x2 = y2 - G(y1), x1 = y1 - F(x2)) and
recomputes F and G under the random state they ran with (so dropout masks repeat), so a stack of N blocks holds
one block's activations instead of N. Chunked feed-forward (``chunked_feed_forward``): the FFN applied to slices
of the sequence, so its wide intermediate exists for one slice at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..masks import MaskMod

__all__ = ["random_rotations", "lsh_buckets", "lsh_attention", "lsh_union_mask", "shared_qk_attention", "ReversibleBlock",
           "ReversibleSequence", "chunked_feed_forward", "ChunkedFeedForward", "SELF_SCORE"]

SELF_SCORE = -1e5  # Reformer's score for a token's own key under exclude_self: chosen only when nothing else is


def random_rotations(head_dim: int, heads: int, n_buckets: int, n_hashes: int,
                     generator: torch.Generator | None = None, device: torch.device | str | None = None,
                     dtype: torch.dtype = torch.float32) -> Tensor:
    """(H, D, n_hashes, n_buckets // 2) Gaussian rotations, one set per head and round."""
    if n_buckets < 1 or (n_buckets > 1 and n_buckets % 2):
        raise ValueError(f"n_buckets must be 1 or even, got {n_buckets}")
    r = torch.randn(heads, head_dim, n_hashes, max(n_buckets // 2, 1), generator=generator, dtype=dtype)
    return r.to(device)


def lsh_buckets(vectors: Tensor, rotations: Tensor, n_buckets: int) -> Tensor:
    """(B, H, L, D) vectors -> (B, H, n_hashes, L) bucket ids in [0, n_buckets): argmax of [xR, -xR]."""
    if n_buckets == 1:
        B, H, L, _ = vectors.shape
        return torch.zeros(B, H, rotations.shape[2], L, dtype=torch.long, device=vectors.device)
    rotated = torch.einsum("bhld,hdrk->bhrlk", vectors, rotations.to(vectors.dtype))
    return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)


def _chunk_windows(x: Tensor, n: int) -> Tensor:
    """(..., n * c, X) sorted rows -> (..., n, W, X): each chunk followed by the chunk before it (the first
    chunk's is the last); W = 2c, or c when there is one chunk (it would see itself twice)."""
    x = x.unflatten(-2, (n, -1))
    if n == 1:
        return x
    return torch.cat([x, x.roll(1, dims=-3)], dim=-2)


def lsh_attention(qk: Tensor, v: Tensor, n_buckets: int, n_hashes: int = 1, chunk: int = 64,
                  mask_mod: MaskMod | None = None, *, query: Tensor | None = None, exclude_self: bool = False,
                  attend_across_buckets: bool = False, generator: torch.Generator | None = None,
                  rotations: Tensor | None = None, scale: float | None = None,
                  return_buckets: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """LSH attention of (B, H, L, D) shared query-keys `qk` and values `v` (see the module's docstring).
    `mask_mod` is the family's hard mask (and padding); `query` replaces qk as the queries (T-TA's query stream);
    `rotations` (random_rotations) or `generator` fixes the hashes. Memory O(n_hashes * L * 2 * chunk).
    With return_buckets, also the (B, H, n_hashes, L) buckets (for lsh_union_mask)."""
    B, H, L, D = qk.shape
    device = qk.device
    scale = D ** -0.5 if scale is None else scale
    if rotations is None:
        rotations = random_rotations(D, H, n_buckets, n_hashes, generator, device, qk.dtype)
    r = rotations.shape[2]
    buckets = lsh_buckets(qk.detach(), rotations, n_buckets)  # hashing has no gradient (an argmax)
    c = max(1, min(chunk, L))
    n = -(-L // c)
    total = n * c
    keys = F.normalize(qk, dim=-1)
    queries = qk if query is None else query
    pad = total - L
    # filler positions L .. total-1 get a bucket of their own past the last, so they sort last; never keys
    b_pad = F.pad(buckets, (0, pad), value=n_buckets)
    pos = torch.arange(total, device=device)
    order = (b_pad * total + pos).argsort(dim=-1)  # (B, H, r, total): sorted by bucket, then position
    rank = order.argsort(dim=-1)  # where each position sits in round r's sorted order
    chunk_of = rank // c  # (B, H, r, total)

    def sort(x: Tensor) -> Tensor:  # (B, H, L, X) -> (B, H, r, total, X) in each round's sorted order
        x = F.pad(x, (0, 0, 0, pad)).unsqueeze(2).expand(B, H, r, total, x.shape[-1])
        return torch.gather(x, 3, order.unsqueeze(-1).expand(B, H, r, total, x.shape[-1]))

    s_pos = torch.gather(pos.expand(B, H, r, total), 3, order)  # (B, H, r, total) original positions
    s_bucket = torch.gather(b_pad, 3, order)
    q_c = sort(queries).unflatten(3, (n, c))  # (B, H, r, n, c, D)
    k_w = _chunk_windows(sort(keys), n)  # (B, H, r, n, W, D)
    v_w = _chunk_windows(sort(v), n)
    qp = s_pos.unflatten(3, (n, c)).unsqueeze(-1)  # (B, H, r, n, c, 1)
    kp = _chunk_windows(s_pos.unsqueeze(-1), n).squeeze(-1).unsqueeze(-2)  # (B, H, r, n, 1, W)

    scores = (q_c @ k_w.transpose(-1, -2)) * scale  # (B, H, r, n, c, W)
    allowed = kp < L
    if not attend_across_buckets:
        qb = s_bucket.unflatten(3, (n, c)).unsqueeze(-1)
        kb = _chunk_windows(s_bucket.unsqueeze(-1), n).squeeze(-1).unsqueeze(-2)
        allowed = allowed & (qb == kb)
    if mask_mod is not None:
        bi = torch.arange(B, device=device).view(B, 1, 1, 1, 1, 1)
        hi = torch.arange(H, device=device).view(1, H, 1, 1, 1, 1)
        allowed = allowed & mask_mod(bi, hi, qp.clamp(max=L - 1), kp.clamp(max=L - 1))
    if exclude_self:
        scores = scores.masked_fill(qp == kp, SELF_SCORE)
    if r > 1:
        # a pair that several rounds hold would count once per round: lower its score by log(count)
        counts = _round_counts(s_pos, chunk_of, None if attend_across_buckets else b_pad, n, c)
        scores = scores - counts.to(scores.dtype).log()
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = scores.logsumexp(dim=-1, keepdim=True)  # (B, H, r, n, c, 1); -inf for a row with nothing
    # a row with nothing keeps -inf scores against a 0 offset: exp gives zeros, not NaN
    p = (scores - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))).exp()
    out = p @ v_w  # (B, H, r, n, c, D)

    # back to positions, then the rounds weighted by their share of the total mass
    out = torch.gather(out.flatten(3, 4), 3, rank.unsqueeze(-1).expand(B, H, r, total, v.shape[-1]))[:, :, :, :L]
    lse = torch.gather(lse.flatten(3, 5), 3, rank)[:, :, :, :L]  # (B, H, r, L)
    top = lse.amax(dim=2, keepdim=True)
    alive = torch.isfinite(top)
    weights = torch.where(alive, (lse - torch.where(alive, top, torch.zeros_like(top))).exp(), torch.zeros_like(lse))
    weights = weights / weights.sum(dim=2, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)
    result = (weights.unsqueeze(-1) * out).sum(dim=2)
    return (result, buckets) if return_buckets else result


def _round_counts(s_pos: Tensor, chunk_of: Tensor, bucket_of: Tensor | None, n: int, c: int) -> Tensor:
    """For each (query, key) pair of each round's windows, (B, H, r, n, c, W): in how many rounds the key is
    among the query's candidates, i.e. in the query's chunk or the one before under that round's order, and in
    its bucket unless bucket_of is None. s_pos (B, H, r, total): the positions in each round's sorted order;
    chunk_of, bucket_of (B, H, r', total): each position's chunk and bucket in round r'."""
    B, H = s_pos.shape[:2]
    bi = torch.arange(B, device=s_pos.device).view(B, 1, 1, 1)
    hi = torch.arange(H, device=s_pos.device).view(1, H, 1, 1)
    # per position (not per pair) tables under every round r', then pairs by broadcasting: (..., r') last
    tables = [chunk_of] if bucket_of is None else [chunk_of, bucket_of]
    looked_up = [t.transpose(2, 3)[bi, hi, s_pos].to(torch.int32) for t in tables]  # (B, H, r, total, r')
    q_chunk = looked_up[0].unflatten(3, (n, c)).unsqueeze(-2)  # (B, H, r, n, c, 1, r')
    k_chunk = _chunk_windows(looked_up[0], n).unsqueeze(-3)  # (B, H, r, n, 1, W, r')
    together = k_chunk == q_chunk
    if n > 1:
        together |= k_chunk == (q_chunk - 1) % n
    if bucket_of is not None:
        together &= _chunk_windows(looked_up[1], n).unsqueeze(-3) == looked_up[1].unflatten(3, (n, c)).unsqueeze(-2)
    # fillers past the length may count 0: they are masked anyway, and log(0) must not reach the scores
    return together.sum(dim=-1).clamp_min(1)


def lsh_union_mask(buckets: Tensor, chunk: int, attend_across_buckets: bool = False) -> Tensor:
    """(B, H, L, L) bool: the pairs that some round of lsh_attention with these buckets (B, H, n_hashes, L)
    considers (before the family mask). For tests: dense attention under it equals lsh_attention."""
    B, H, r, L = buckets.shape
    c = max(1, min(chunk, L))
    n = -(-L // c)
    total = n * c
    pos = torch.arange(total, device=buckets.device)
    b_pad = F.pad(buckets, (0, total - L), value=int(buckets.max()) + 1)
    rank = (b_pad * total + pos).argsort(dim=-1).argsort(dim=-1)[..., :L]
    chunk_of = rank // c
    cq, ck = chunk_of.unsqueeze(-1), chunk_of.unsqueeze(-2)  # (B, H, r, L, 1), (B, H, r, 1, L)
    together = (ck == cq) if n == 1 else (ck == cq) | (ck == (cq - 1) % n)
    if not attend_across_buckets:
        together = together & (buckets.unsqueeze(-1) == buckets.unsqueeze(-2))
    return together.any(dim=2)


def shared_qk_attention(qk: Tensor, v: Tensor, mask: Tensor | None = None, *, query: Tensor | None = None,
                        exclude_self: bool = False, scale: float | None = None) -> Tensor:
    """Dense attention as LSH attention scores it (unit keys, Reformer's self rule), under a bool `mask`
    (True = may attend); rows with nothing to attend give zeros. The reference lsh_attention is tested against."""
    D = qk.shape[-1]
    L = qk.shape[-2]
    scale = D ** -0.5 if scale is None else scale
    queries = qk if query is None else query
    scores = (queries @ F.normalize(qk, dim=-1).transpose(-1, -2)) * scale
    if exclude_self:
        scores = scores.masked_fill(torch.eye(L, dtype=torch.bool, device=qk.device), SELF_SCORE)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = scores.softmax(dim=-1)
    return p.nan_to_num(0.0) @ v if mask is not None else p @ v


def _rng_state(device: torch.device) -> tuple[Tensor, Tensor | None]:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _trainable(module: nn.Module) -> list[Tensor]:
    return [p for p in module.parameters() if p.requires_grad]


class ReversibleBlock(nn.Module):
    """y1 = x1 + F(x2), y2 = x2 + G(y1), for any modules F and G that keep the shape (in Reformer F is the
    attention and G the feed-forward, each with its norm). Calling the block runs it plainly, activations
    kept; ReversibleSequence runs blocks without them."""

    def __init__(self, f: nn.Module, g: nn.Module) -> None:
        super().__init__()
        self.f, self.g = f, g

    def forward(self, x1: Tensor, x2: Tensor) -> tuple[Tensor, Tensor]:
        y1 = x1 + self.f(x2)
        return y1, x2 + self.g(y1)

    def forward_recording(self, x1: Tensor, x2: Tensor) -> tuple[Tensor, Tensor, tuple[object, object]]:
        """The forward, with the random states F and G start from (for recomputing the same dropout)."""
        state_f = _rng_state(x1.device)
        y1 = x1 + self.f(x2)
        state_g = _rng_state(x1.device)
        return y1, x2 + self.g(y1), (state_f, state_g)

    @staticmethod
    def _rerun(module: nn.Module, x: Tensor, state: tuple[Tensor, Tensor | None]) -> Tensor:
        with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
            torch.set_rng_state(state[0])
            if state[1] is not None:
                torch.cuda.set_rng_state(state[1], x.device)
            return module(x)

    def backward_from(self, y1: Tensor, y2: Tensor, dy1: Tensor, dy2: Tensor, states: tuple[object, object],
                      context: Sequence[Tensor] = ()
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[Tensor | None, ...], list[Tensor | None]]:
        """From the outputs and their gradients: the inputs, their gradients, the gradients of F's then G's
        trainable parameters, and those of the `context` tensors F and G read besides their input (a position
        bias, keys/values projected outside the block), None where they read none."""
        state_f, state_g = states
        params_f, params_g = _trainable(self.f), _trainable(self.g)
        n_ctx = len(context)
        with torch.enable_grad():
            y1 = y1.detach().requires_grad_(True)
            g_out = self._rerun(self.g, y1, state_g)  # type: ignore[arg-type]
            dy1_g, *grads_g = torch.autograd.grad(g_out, [y1, *params_g, *context], dy2, allow_unused=True)
        x2 = (y2 - g_out).detach()
        dy1 = dy1 + dy1_g
        with torch.enable_grad():
            x2.requires_grad_(True)
            f_out = self._rerun(self.f, x2, state_f)  # type: ignore[arg-type]
            dx2_f, *grads_f = torch.autograd.grad(f_out, [x2, *params_f, *context], dy1, allow_unused=True)
        x1 = (y1 - f_out).detach()
        split_f, split_g = len(grads_f) - n_ctx, len(grads_g) - n_ctx
        ctx_grads = [_add(a, b) for a, b in zip(grads_f[split_f:], grads_g[split_g:], strict=True)]
        return x1, x2.detach(), dy1, dy2 + dx2_f, (*grads_f[:split_f], *grads_g[:split_g]), ctx_grads


def _add(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    return b if a is None else a if b is None else a + b


class _ReversibleFunction(torch.autograd.Function):
    """Runs the blocks keeping only the last outputs; backward rebuilds each block's inputs from its outputs and
    recomputes it. The parameters are inputs of the function so that their gradients come back through
    autograd (torch.autograd.grad and hooks see them), not only as .grad side effects; so are the first
    first len(stand_ins) of them, the context tensors whose detached stand-ins the blocks read besides their
    inputs (stand-ins: so that recomputing a block stops at them instead of running on into the graph that made
    them)."""

    @staticmethod
    def forward(ctx, x1: Tensor, x2: Tensor, blocks: Sequence[ReversibleBlock], stand_ins: Sequence[Tensor],
                *tensors: Tensor):
        ctx.blocks = blocks
        ctx.context = stand_ins
        ctx.states = []
        with torch.no_grad():
            for block in blocks:
                x1, x2, states = block.forward_recording(x1, x2)
                ctx.states.append(states)
        ctx.save_for_backward(x1, x2)
        return x1, x2

    @staticmethod
    def backward(ctx, dy1: Tensor, dy2: Tensor):
        y1, y2 = ctx.saved_tensors
        per_block = []
        context: list[Tensor | None] = [None] * len(ctx.context)
        for block, states in zip(reversed(ctx.blocks), reversed(ctx.states), strict=True):
            y1, y2, dy1, dy2, grads, ctx_grads = block.backward_from(y1, y2, dy1, dy2, states, ctx.context)
            per_block.append(grads)
            context = [_add(a, b) for a, b in zip(context, ctx_grads, strict=True)]
        return (dy1, dy2, None, None, *context, *(g for grads in reversed(per_block) for g in grads))


class ReversibleSequence(nn.Module):
    """Reversible blocks run with activation memory of one block, whatever their number. forward(x1, x2) ->
    (y1, y2); Reformer feeds (x, x) and sums or concatenates the outputs. `reversible=False` runs the same
    blocks plainly (the reference, and for inference, where nothing is saved anyway). `context`: pairs (tensor,
    stand-in) for what the blocks read besides their inputs (through closures) and needs a gradient: the blocks
    read the stand-in, a leaf (tensor.detach().requires_grad_(); a parameter may be its own), and the backward
    pass hands the tensor the stand-in's gradient."""

    def __init__(self, blocks: Sequence[ReversibleBlock], reversible: bool = True) -> None:
        super().__init__()
        if not blocks:
            raise ValueError("ReversibleSequence needs at least one block")
        self.blocks = nn.ModuleList(blocks)
        self.reversible = reversible

    def forward(self, x1: Tensor, x2: Tensor,
                context: Sequence[tuple[Tensor, Tensor]] = ()) -> tuple[Tensor, Tensor]:
        if not self.reversible or not torch.is_grad_enabled():
            for block in self.blocks:
                x1, x2 = block(x1, x2)
            return x1, x2
        params = [p for block in self.blocks for p in (*_trainable(block.f), *_trainable(block.g))]
        if any(not stand_in.is_leaf for _, stand_in in context):
            raise ValueError("a reversible block's context stand-ins must be leaves (tensor.detach())")
        outer = [tensor for tensor, _ in context]
        return _ReversibleFunction.apply(x1, x2, list(self.blocks), [s for _, s in context], *outer, *params)


def chunked_feed_forward(ffn: nn.Module, h: Tensor, chunk: int, dim: int = 1) -> Tensor:
    """ffn applied to slices of `chunk` along `dim` (the sequence), concatenated: equal to ffn(h) for a
    position-wise ffn, with its intermediate (4x wider in BERT) alive for one slice at a time in inference.
    In training autograd still keeps every slice's intermediate unless the layer is reversible or
    checkpointed (Reformer combines the two)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if h.shape[dim] <= chunk:
        return ffn(h)
    return torch.cat([ffn(part) for part in h.split(chunk, dim=dim)], dim=dim)


class ChunkedFeedForward(nn.Module):
    """A position-wise module run by chunked_feed_forward."""

    def __init__(self, ffn: nn.Module, chunk: int, dim: int = 1) -> None:
        super().__init__()
        self.ffn, self.chunk, self.dim = ffn, chunk, dim

    def forward(self, h: Tensor) -> Tensor:
        return chunked_feed_forward(self.ffn, h, self.chunk, self.dim)
