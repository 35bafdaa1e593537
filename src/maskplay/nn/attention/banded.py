"""Sliding-window (banded) attention for long sequences, with optional global tokens, in memory linear in length.

``sliding_window_attention`` computes exactly what dense attention under the materialised mask

    and_masks(or_masks(sliding_window(window), global_tokens(g)), mask_mod)

computes (tests/nn/test_sparse_attention.py holds it to dense SDPA within 1e-5, forward and gradient), without ever
forming an L x L tensor: queries go in chunks of `chunk`, and the chunk [s, e) scores only the keys of its band
[s - window, e + window) plus the G global keys, so scores, probabilities and what autograd saves are
L x (chunk + 2 * window + G). Global queries see every key: G x L more. Any boolean ``MaskMod`` (T-TA's
no-diagonal, padding, causal, ...) is still applied inside the band. A query with nothing to attend gets zeros.

``flex_sliding_window_attention`` runs the same pattern through FlexAttention with a block mask built from the
band directly (``band_block_mask``: no L x L evaluation). In torch 2.13 FlexAttention runs forward on CPU only
under ``torch.compile`` (uncompiled it materialises the full score matrix) and has no backward on CPU, so on CPU
it serves inference only; training uses ``sliding_window_attention``.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

from ..masks import MaskMod, and_masks, or_masks
from .long_masks import global_flags, global_tokens, sliding_window

__all__ = ["sliding_window_attention", "masked_attention", "band_mask", "band_block_mask",
           "flex_sliding_window_attention", "FLEX_CPU_NO_BACKWARD"]

# FlexAttention on CPU (torch 2.13): forward under torch.compile, no backward. One message for the error,
# the tests' skip reason and the docs.
FLEX_CPU_NO_BACKWARD = ("FlexAttention has no backward on CPU in this torch (NotImplementedError: 'FlexAttention "
                        "does not support backward on CPU'): train with sliding_window_attention")


def band_mask(window: int, mask_mod: MaskMod | None = None, global_positions: Tensor | None = None,
              seq_len: int | None = None) -> MaskMod:
    """The mask sliding_window_attention computes: (|i - j| <= window OR global) AND mask_mod."""
    pattern = sliding_window(window)
    if global_positions is not None:
        pattern = or_masks(pattern, global_tokens(global_positions, seq_len))
    return pattern if mask_mod is None else and_masks(pattern, mask_mod)


def masked_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None = None,
                     dropout_p: float = 0.0) -> Tensor:
    """Dense SDPA under a bool mask (True = may attend) or a float one (added to the scores, -inf = hidden);
    rows that may attend to nothing give zeros, not NaN. The reference the banded kernel is tested against,
    and the dense case of the benchmark. `dropout_p`: attention dropout (training)."""
    if mask.dtype == torch.bool:
        dead = ~mask.any(dim=-1, keepdim=True)
        guarded = mask | dead
    else:
        dead = ~torch.isfinite(mask).any(dim=-1, keepdim=True)
        guarded = mask.masked_fill(dead, 0.0)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=guarded, scale=scale, dropout_p=dropout_p)
    return out.masked_fill(dead, 0.0)


def _with_bias(allowed: Tensor, bias: Tensor) -> Tensor:
    """The float mask: bias where allowed, -inf elsewhere."""
    return torch.where(allowed, bias, torch.full((), float("-inf"), dtype=bias.dtype, device=bias.device))


def sliding_window_attention(q: Tensor, k: Tensor, v: Tensor, window: int, mask_mod: MaskMod | None = None, *,
                             global_positions: Tensor | None = None, chunk: int | None = None,
                             scale: float | None = None, bias_mod: MaskMod | None = None,
                             dropout_p: float = 0.0) -> Tensor:
    """Attention of q (B, H, L, D) over k, v (B, H, L, D) restricted to |i - j| <= window, plus global tokens
    (``global_positions``: (B, L) bool or (B, G) indices with -1 for none), AND `mask_mod`. Equal to
    ``masked_attention(q, k, v, materialize_heads(band_mask(...)))`` in memory O(L * (chunk + 2 * window + G)).
    `bias_mod(b, h, q, kv)`, where given, returns a float added to the allowed scores (-inf hides a key), the
    way adaptive span's soft mask enters as log m(|i - j|).
    `chunk` (queries per block) defaults to max(window, 64): smaller wastes less of the band, larger makes
    fewer, larger matmuls (docs/results/benchmarks.md). `dropout_p`: attention dropout on the probabilities
    (training)."""
    B, H, L, D = q.shape
    if k.shape[2] != L or v.shape[2] != L:
        raise ValueError("sliding_window_attention is self-attention shaped: q, k and v need one length")
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    c = max(1, min(chunk or max(window, 64), L))
    n = -(-L // c)
    band = c + 2 * window
    device = q.device

    # Each chunk of c queries is one batch entry of a single SDPA call (B * n, H, c, D) against its own band of
    # keys (B * n, H, band [+ G], D): SDPA's fused CPU kernel, no L x L tensor. Keys are padded by `window` on
    # the left and up to n * c + window on the right, so chunk t's band is the slice [t * c, t * c + band).
    right = n * c - L + window

    def bands(x: Tensor) -> Tensor:
        return F.pad(x, (0, 0, window, right)).unfold(2, band, c).permute(0, 2, 1, 4, 3)  # (B, n, H, band, D)

    q_chunks = F.pad(q, (0, 0, 0, n * c - L)).view(B, H, n, c, D).transpose(1, 2)  # (B, n, H, c, D)
    k_bands, v_bands = bands(k), bands(v)
    q_idx = torch.arange(n * c, device=device).view(1, n, 1, c, 1)
    kv_idx = (torch.arange(n, device=device).view(n, 1) * c - window
              + torch.arange(band, device=device).view(1, band)).view(1, n, 1, 1, band)
    bi = torch.arange(B, device=device).view(B, 1, 1, 1, 1)
    hi = torch.arange(H, device=device).view(1, 1, H, 1, 1)
    # |q - kv| <= window depends only on the offsets inside a chunk, (c, band): one small pattern for all chunks
    offset = torch.arange(c, device=device).view(c, 1) + window - torch.arange(band, device=device).view(1, band)
    allowed = (offset.abs() <= window).view(1, 1, 1, c, band) & ((kv_idx >= 0) & (kv_idx < L))
    if mask_mod is not None:
        # indices outside [0, L) are clamped only so that a mask_mod's lookups stay in range; `allowed` hides them
        allowed = allowed & mask_mod(bi, hi, q_idx.clamp(max=L - 1), kv_idx.clamp(0, L - 1))
    if bias_mod is not None:
        allowed = _with_bias(allowed, bias_mod(bi, hi, q_idx.clamp(max=L - 1), kv_idx.clamp(0, L - 1)))

    flags = None if global_positions is None else global_flags(global_positions.to(device), L)  # (B, L)
    if flags is not None:
        G = max(int(flags.sum(dim=1).max()), 1)
        # each row's global positions first, in order (a stable sort of the flags); slots past a row's count
        # point at some position and are hidden by `valid`
        g_pos = flags.long().argsort(dim=1, descending=True, stable=True)[:, :G]  # (B, G)
        valid = torch.gather(flags, 1, g_pos)
        gather = g_pos.view(B, 1, G, 1).expand(B, H, G, D)
        k_g, v_g = torch.gather(k, 2, gather), torch.gather(v, 2, gather)  # (B, H, G, D)
        # every query also sees the global keys; a global key inside the query's band is left to the band
        g_idx = g_pos.view(B, 1, 1, 1, G)
        g_allowed = valid.view(B, 1, 1, 1, G) & ((q_idx - g_idx).abs() > window)
        if mask_mod is not None:
            g_allowed = g_allowed & mask_mod(bi, hi, q_idx.clamp(max=L - 1), g_idx)
        if bias_mod is not None:
            g_allowed = _with_bias(g_allowed, bias_mod(bi, hi, q_idx.clamp(max=L - 1), g_idx))
        rows = torch.broadcast_shapes(allowed.shape[:-1], g_allowed.shape[:-1])
        allowed = torch.cat([allowed.expand(*rows, band), g_allowed.expand(*rows, G)], dim=-1)
        k_bands = torch.cat([k_bands, k_g.unsqueeze(1).expand(B, n, H, G, D)], dim=3)
        v_bands = torch.cat([v_bands, v_g.unsqueeze(1).expand(B, n, H, G, D)], dim=3)
    allowed = allowed.expand(B, n, allowed.shape[2], c, allowed.shape[-1])
    out = masked_attention(q_chunks.reshape(B * n, H, c, D), k_bands.reshape(B * n, H, -1, D),
                           v_bands.reshape(B * n, H, -1, D), allowed.reshape(B * n, allowed.shape[2], c, -1), scale,
                           dropout_p)
    out = out.view(B, n, H, c, D).transpose(1, 2).reshape(B, H, n * c, D)[:, :, :L]
    if flags is None:
        return out

    return _global_queries(q, k, v, out, g_pos, valid, mask_mod, bias_mod, scale, dropout_p)


def _global_queries(q: Tensor, k: Tensor, v: Tensor, out: Tensor, g_pos: Tensor, valid: Tensor,
                    mask_mod: MaskMod | None, bias_mod: MaskMod | None, scale: float | None, dropout_p: float) -> Tensor:
    """The banded output with the global queries' rows replaced: each global query sees every key (G x L scores,
    linear in L). g_pos (B, G): each row's global positions first; valid (B, G): which slots are real."""
    B, H, L, D = q.shape
    G = g_pos.shape[1]
    device = q.device
    bi = torch.arange(B, device=device).view(B, 1, 1, 1)
    hi = torch.arange(H, device=device).view(1, H, 1, 1)
    keys = torch.arange(L, device=device).view(1, 1, 1, L)
    full = torch.ones(1, 1, 1, L, dtype=torch.bool, device=device) if mask_mod is None else \
        mask_mod(bi, hi, g_pos.view(B, 1, G, 1), keys)
    full = full & valid.view(B, 1, G, 1)
    if bias_mod is not None:
        full = _with_bias(full, bias_mod(bi, hi, g_pos.view(B, 1, G, 1), keys))
    gather = g_pos.view(B, 1, G, 1).expand(B, H, G, D)
    out_g = masked_attention(torch.gather(q, 2, gather), k, v, full.expand(B, full.shape[1], G, L), scale, dropout_p)
    # the global rows replace their band rows; slots past a row's count write to a spare row L, dropped after
    target = g_pos.masked_fill(~valid, L).view(B, 1, G, 1).expand(B, H, G, D)
    return F.pad(out, (0, 0, 0, 1)).scatter(2, target, out_g)[:, :, :L]


def band_block_mask(seq_len: int, window: int, mask_mod: MaskMod | None = None,
                    global_positions: Tensor | None = None, batch: int = 1, block_size: int = 128,
                    device: torch.device | str | None = None):
    """A FlexAttention BlockMask for band_mask(window, mask_mod, global_positions) built from the band's block
    structure (O((L / block)^2) booleans) instead of evaluating the mask on all L x L pairs as
    create_block_mask does (seconds and L^2 bytes at 8192). Every listed block is partial: the mask_mod decides
    inside it, so the result is exact whatever mask_mod hides."""
    from torch.nn.attention.flex_attention import BlockMask

    nb = -(-seq_len // block_size)
    blocks = torch.arange(nb, device=device)
    reach = -(-window // block_size)  # a key block holds a key within `window` of some query of the query block
    table = ((blocks.view(nb, 1) - blocks.view(1, nb)).abs() <= reach).expand(batch, 1, nb, nb)
    if global_positions is not None:
        flags = global_flags(global_positions.to(device), seq_len)
        flags = F.pad(flags, (0, nb * block_size - seq_len)).view(batch, nb, block_size).any(-1)  # (B, nb)
        table = table | flags.view(batch, 1, nb, 1) | flags.view(batch, 1, 1, nb)
    table = table.contiguous()
    counts = table.sum(-1).to(torch.int32)
    # listed blocks first, in order: a stable sort of "not listed"
    indices = (~table).to(torch.int8).argsort(dim=-1, stable=True).to(torch.int32)
    return BlockMask.from_kv_blocks(counts, indices, BLOCK_SIZE=block_size,
                                    mask_mod=in_range(band_mask(window, mask_mod, global_positions, seq_len), seq_len),
                                    seq_lengths=(seq_len, seq_len))


def in_range(mask_mod: MaskMod, seq_len: int) -> MaskMod:
    """mask_mod made safe at the padding of the last block: FlexAttention may evaluate it at indices up to a
    multiple of the block size, where a mod that indexes a (B, seq_len) tensor (padding, global tokens) would read
    out of bounds (a compiled kernel's "index out of bounds"). Such indices read position 0 and their pairs are hidden."""
    last = seq_len - 1
    def safe(b, h, q, kv):
        inside = (q <= last) & (kv <= last)
        return inside & mask_mod(b, h, torch.where(q <= last, q, 0), torch.where(kv <= last, kv, 0))

    return safe


@lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex_sliding_window_attention(q: Tensor, k: Tensor, v: Tensor, window: int, mask_mod: MaskMod | None = None,
                                  *, global_positions: Tensor | None = None, block_mask=None,
                                  scale: float | None = None) -> Tensor:
    """sliding_window_attention through compiled FlexAttention (forward only on CPU: see FLEX_CPU_NO_BACKWARD).
    Pass `block_mask` (band_block_mask) to build it once per batch for all layers. The first call per shape
    compiles (about 25 s on the project's CPU). Rows with nothing to attend come out as zeros."""
    B, H, L, D = q.shape
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(FLEX_CPU_NO_BACKWARD)
    if block_mask is None:
        block_mask = band_block_mask(L, window, mask_mod, global_positions, batch=B, device=q.device)
    return _compiled_flex()(q, k, v, block_mask=block_mask, scale=scale if scale is not None else D ** -0.5)
