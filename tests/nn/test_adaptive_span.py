"""Adaptive span (maskplay.nn.attention.adaptive_span) against the paper's formula, its penalty's gradient, and its dense and
banded attention paths against each other."""

from __future__ import annotations

import math

import pytest
import torch

from maskplay.nn.attention.adaptive_span import AdaptiveSpan
from maskplay.nn.masks import and_masks, no_diagonal, padding

B, H, L, D = 2, 3, 20, 4


def make_span(fractions=(0.13, 0.37, 0.81), max_span: int = 10, ramp: int = 4) -> AdaptiveSpan:
    span = AdaptiveSpan(H, max_span=max_span, ramp=ramp)
    with torch.no_grad():
        span.span_fraction.copy_(torch.tensor(fractions))
    return span


def test_soft_mask_is_the_formula():
    span = make_span()
    distance = torch.arange(30)
    got = span.soft_mask(distance)
    for h, z in enumerate([1.3, 3.7, 8.1]):
        for x in range(30):
            want = min(max((4 + z - x) / 4, 0.0), 1.0)
            assert math.isclose(got[h, x].item(), want, abs_tol=1e-6)


def test_renormalised_weights_are_the_papers():
    span = make_span()
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(B, H, L, L, generator=g)
    got = span(scores.softmax(-1))
    z = span.z.tolist()
    for b in range(B):
        for h in range(H):
            for i in range(L):
                m = [min(max((4 + z[h] - abs(i - j)) / 4, 0.0), 1.0) for j in range(L)]
                e = [m[j] * math.exp(scores[b, h, i, j].item()) for j in range(L)]
                total = sum(e)
                for j in range(L):
                    assert math.isclose(got[b, h, i, j].item(), e[j] / total, rel_tol=1e-4, abs_tol=1e-7)


def reference(span: AdaptiveSpan, q, k, v, hidden: torch.Tensor | None = None) -> torch.Tensor:
    """softmax under the hard mask, then the span's renormalised soft mask, then the values: the paper's order."""
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if hidden is not None:
        scores = scores.masked_fill(hidden, float("-inf"))
    return span(scores.softmax(-1).nan_to_num(0.0)) @ v


@pytest.mark.parametrize("banded", [False, True])
def test_attention_paths_equal_the_reference_with_gradients(banded):
    # spans of 1.3, 3.7, 8.1 tokens: no distance falls exactly on z + R, where m_z has a kink and the
    # multiplicative and the log-bias forms pick different one-sided derivatives
    span = make_span()
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(B, H, L, D, generator=g, requires_grad=True) for _ in range(3))
    am = torch.arange(L)[None, :] < torch.tensor([[L], [15]])
    mod = and_masks(no_diagonal(), padding(am))
    hidden = ~(mod(torch.arange(B).view(B, 1, 1, 1), None, torch.arange(L).view(1, 1, L, 1),
                   torch.arange(L).view(1, 1, 1, L)))
    out = span.attention(q, k, v, mod, banded=banded, chunk=6)
    want = reference(span, q, k, v, hidden)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=0)
    direction = torch.randn_like(out)
    params = (q, k, v, span.span_fraction)
    got, expected = torch.autograd.grad(out, params, direction), torch.autograd.grad(want, params, direction)
    for a, b in zip(got[:3], expected[:3], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # z's gradient sums B x H x L x L terms to about 5 in magnitude: fp32 summation order (thread count) moves
    # it by ~2e-5, so it is held relatively
    torch.testing.assert_close(got[3], expected[3], atol=1e-5, rtol=5e-5)


def test_window_is_where_every_head_reaches_zero():
    span = make_span()  # largest z = 8.1, ramp 4: the mask is 0 from distance 12.1 on
    assert span.window() == 12
    got = span.soft_mask(torch.tensor([12, 13]))[2].tolist()
    assert got[0] == pytest.approx(0.025, abs=1e-6) and got[1] == 0.0


def test_penalty_gradient_reaches_z():
    span = make_span()
    span.penalty().backward()
    # penalty = mean(max_span * fraction): d/d fraction = max_span / H for every head
    torch.testing.assert_close(span.span_fraction.grad, torch.full((H,), 10 / H))


def test_the_loss_moves_z_only_through_the_ramp():
    span = make_span(fractions=(0.0, 0.0, 0.0), max_span=10, ramp=4)  # ramp from distance 0 to 4
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, H, L, D, generator=g) for _ in range(3))
    span.attention(q, k, v, no_diagonal()).pow(2).sum().backward()
    assert (span.span_fraction.grad.abs() > 0).all()
    far = make_span(fractions=(1.0, 1.0, 1.0), max_span=40, ramp=4)  # every distance < 20 sits at m = 1
    far.attention(q, k, v, no_diagonal()).pow(2).sum().backward()
    assert torch.equal(far.span_fraction.grad, torch.zeros(H))


def test_a_row_left_with_nothing_is_zero_not_nan():
    span = AdaptiveSpan(H, max_span=10, ramp=1)  # z = 0, ramp 1: only distance 0 has weight, T-TA hides it
    q, k, v = (torch.randn(1, H, L, D, requires_grad=True) for _ in range(3))
    for banded in (False, True):
        out = span.attention(q, k, v, no_diagonal(), banded=banded)
        assert torch.equal(out, torch.zeros_like(out))
        out.sum().backward()
        assert torch.isfinite(span.span_fraction.grad).all()


def test_spans_report_and_clamp():
    span = make_span(fractions=(0.1, 0.35, 0.8))
    assert span.spans() == [1.0, 3.5, 8.0]
    with torch.no_grad():
        span.span_fraction.add_(torch.tensor([-0.5, 0.0, 0.5]))
    span.clamp_()
    assert span.spans() == [0.0, 3.5, 10.0]
    with pytest.raises(ValueError):
        span.attention(*(torch.randn(1, 2, 4, 4) for _ in range(3)))  # two heads, not three
