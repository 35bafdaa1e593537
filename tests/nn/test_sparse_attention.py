"""The banded kernel (maskplay.nn.attention.banded) against dense SDPA under the materialised mask, forward and
gradient, in fp32; its memory linear in length; the FlexAttention path where this torch runs it."""

from __future__ import annotations

import pytest
import torch

from maskplay.nn.attention.banded import (
    FLEX_CPU_NO_BACKWARD,
    band_block_mask,
    band_mask,
    flex_sliding_window_attention,
    masked_attention,
    sliding_window_attention,
)
from maskplay.nn.attention.long_masks import materialize_heads
from maskplay.nn.masks import and_masks, causal, no_diagonal, padding
from tests.nn.test_long_masks import self_gradients

B, H, L, D = 2, 3, 37, 8
LENGTHS = torch.tensor([37, 29])


def inputs(seed: int = 0, length: int = L) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, length, D, generator=g, requires_grad=True) for _ in range(3))


def attention_mask(length: int = L) -> torch.Tensor:
    return torch.arange(length)[None, :] < LENGTHS[:, None]


MASKS = {
    "none": lambda: None,
    "tta": lambda: and_masks(no_diagonal(), padding(attention_mask())),
    "gpt": lambda: and_masks(causal(), padding(attention_mask())),
}
GLOBALS = {"none": None, "indices": torch.tensor([[0, 20], [3, -1]]),
           "flags": torch.arange(L)[None, :].expand(B, L) % 17 == 1}


@pytest.mark.parametrize("window,chunk", [(0, 4), (1, 1), (3, 5), (4, 8), (6, 64), (50, 7)])
@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("glob", sorted(GLOBALS))
def test_banded_equals_dense_sdpa_forward_and_gradient(window, chunk, mask, glob):
    q, k, v = inputs()
    mod, positions = MASKS[mask](), GLOBALS[glob]
    out = sliding_window_attention(q, k, v, window, mod, global_positions=positions, chunk=chunk)
    dense = masked_attention(q, k, v, materialize_heads(band_mask(window, mod, positions, L), B, H, L))
    assert not out.isnan().any()
    torch.testing.assert_close(out, dense, atol=1e-5, rtol=0)
    direction = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), direction)
    want = torch.autograd.grad(dense, (q, k, v), direction)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_rows_with_nothing_to_attend_are_zero_with_finite_gradients():
    q, k, v = inputs()
    # window 0 under T-TA: every query's only key is itself, which no_diagonal hides
    out = sliding_window_attention(q, k, v, 0, no_diagonal(), chunk=4)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_padding_queries_and_keys_stay_hidden():
    q, k, v = inputs()
    out = sliding_window_attention(q, k, v, 5, padding(attention_mask()), chunk=6)
    (grad_k,) = torch.autograd.grad(out[1, :, :29].sum(), k)
    assert grad_k[1, :, 29:].abs().sum() == 0  # padding keys never reach real rows
    assert grad_k[1, :, :29].abs().sum() > 0


def test_window_beyond_the_length_is_dense_attention():
    q, k, v = inputs()
    out = sliding_window_attention(q, k, v, 2 * L, chunk=8)
    dense = masked_attention(q, k, v, torch.ones(1, 1, L, L, dtype=torch.bool))
    torch.testing.assert_close(out, dense, atol=1e-5, rtol=0)


def test_shape_errors():
    q, k, v = inputs()
    with pytest.raises(ValueError):
        sliding_window_attention(q, k[:, :, :-1], v[:, :, :-1], 3)
    with pytest.raises(ValueError):
        sliding_window_attention(q, k, v, -1)


def saved_bytes(fn, length: int) -> int:
    """Bytes of the tensors autograd saves for backward: what a training step holds per layer."""
    q, k, v = inputs(length=length)
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(q, k, v, length)
    return total


def test_saved_memory_is_linear_in_length_and_dense_is_not():
    def banded(q, k, v, n):
        return sliding_window_attention(q, k, v, 16, no_diagonal(), chunk=32)

    def dense(q, k, v, n):
        return masked_attention(q, k, v, materialize_heads(band_mask(16, no_diagonal()), 1, 1, n))

    small, large = saved_bytes(banded, 512), saved_bytes(banded, 2048)
    assert large / small < 4.4  # 4x the length, about 4x the memory
    d_small, d_large = saved_bytes(dense, 512), saved_bytes(dense, 2048)
    assert d_large / d_small > 10  # the dense mask alone grows 16x


@pytest.mark.parametrize("pattern", ["window", "window+global"])
def test_tta_no_leak_through_the_banded_kernel(pattern):
    positions = torch.tensor([[0, 4], [8, -1]]) if pattern == "window+global" else None

    def attend(mod):
        return lambda q, k, v: sliding_window_attention(q, k, v, 2, mod, global_positions=positions, chunk=3)

    norms = self_gradients(attend(no_diagonal()))
    assert torch.all(norms.diagonal(dim1=-2, dim2=-1) == 0)
    assert norms.sum() > 0
    leaky = self_gradients(attend(None))  # the same kernel without T-TA's mask leaks: the test can fail
    assert torch.all(leaky.diagonal(dim1=-2, dim2=-1) > 0)


def test_band_block_mask_covers_every_block_create_block_mask_finds():
    from torch.nn.attention.flex_attention import create_block_mask

    n, glob = 600, torch.tensor([[5, 300]])
    mod = band_mask(100, no_diagonal(), glob, n)
    ours = band_block_mask(n, 100, no_diagonal(), glob).to_dense()
    theirs = create_block_mask(mod, 1, None, n, n, device="cpu").to_dense()
    assert not (theirs.bool() & ~ours.bool()).any()
    assert ours.sum() < ours.numel()  # and it does skip blocks


def test_flex_refuses_a_training_call_on_cpu_with_the_reason():
    q, k, v = inputs()
    with pytest.raises(NotImplementedError, match="no backward on CPU"):
        flex_sliding_window_attention(q, k, v, 3)


def test_block_mask_mod_is_safe_at_the_padding_of_the_last_block():
    """FlexAttention may evaluate the mask at indices up to the padded length (300 -> 384 in blocks of 128); the
    padding and global-token mods index (B, 300) tensors, so without a guard that reads out of bounds."""
    am = torch.arange(300)[None, :] < torch.tensor([[300], [250]])
    glob = torch.tensor([[0, 140], [5, -1]])
    block_mask = band_block_mask(300, 20, and_masks(no_diagonal(), padding(am)), glob, batch=2)
    b, h = torch.tensor(1), torch.tensor(0)
    for q, kv in ((10, 350), (383, 5), (383, 383), (299, 383)):
        assert not bool(block_mask.mask_mod(b, h, torch.tensor(q), torch.tensor(kv)))
    # inside the sequence it is the band mask itself
    dense = band_mask(20, and_masks(no_diagonal(), padding(am)), glob, 300)
    for q, kv in ((10, 12), (10, 10), (5, 200), (100, 5), (260, 255), (100, 240)):
        args = (b, h, torch.tensor(q), torch.tensor(kv))
        assert bool(block_mask.mask_mod(*args)) == bool(dense(*args)), (q, kv)


@pytest.mark.heavy
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # torch.compile's own
def test_flex_forward_equals_dense():
    """Compiles FlexAttention (tens of seconds on CPU)."""
    with torch.no_grad():
        q, k, v = (t.detach() for t in inputs(length=300))
        am = torch.arange(300)[None, :] < torch.tensor([[300], [250]])
        mod = and_masks(no_diagonal(), padding(am))
        glob = torch.tensor([[0, 140], [5, -1]])
        out = flex_sliding_window_attention(q, k, v, 20, mod, global_positions=glob)
        dense = masked_attention(q, k, v, materialize_heads(band_mask(20, mod, glob, 300), B, H, 300))
    torch.testing.assert_close(out, dense, atol=1e-5, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=FLEX_CPU_NO_BACKWARD)
def test_flex_backward_equals_dense_where_there_is_one():
    q, k, v = (t.detach().cuda().requires_grad_() for t in inputs(length=256))
    out = flex_sliding_window_attention(q, k, v, 16, no_diagonal())
    dense = masked_attention(q, k, v, materialize_heads(band_mask(16, no_diagonal()), 1, 1, 256, device="cuda"))
    direction = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), direction), torch.autograd.grad(dense, (q, k, v), direction),
                    strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
