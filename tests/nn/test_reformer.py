"""Reformer pieces (maskplay.nn.attention.reformer): LSH attention against dense shared-QK attention, the family mask inside
it, T-TA under it; reversible blocks and chunked feed-forward against their plain forms."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from maskplay.nn.attention.long_masks import materialize_heads
from maskplay.nn.attention.reformer import (
    ChunkedFeedForward,
    ReversibleBlock,
    ReversibleSequence,
    chunked_feed_forward,
    lsh_attention,
    lsh_union_mask,
    random_rotations,
    shared_qk_attention,
)
from maskplay.nn.masks import and_masks, causal, no_diagonal, padding
from tests.nn.test_long_masks import self_gradients

B, H, L, D = 2, 2, 30, 8
ATTENTION_MASK = torch.arange(L)[None, :] < torch.tensor([[L], [22]])


def tensors(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, L, D, generator=g, requires_grad=True),
            torch.randn(B, H, L, D, generator=g, requires_grad=True))


def assert_same_with_gradients(out, ref, inputs):
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    direction = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, inputs, direction), torch.autograd.grad(ref, inputs, direction),
                    strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("n_hashes", [1, 3])
@pytest.mark.parametrize("chunk", [30, 15, 8])
def test_one_bucket_is_dense_shared_qk_attention(n_hashes, chunk):
    """One bucket and chunks covering the sequence with the look-back (one chunk, two chunks) is dense attention;
    with more chunks it is dense attention over the chunk windows."""
    qk, v = tensors()
    mod = and_masks(no_diagonal(), padding(ATTENTION_MASK))
    out, buckets = lsh_attention(qk, v, n_buckets=1, n_hashes=n_hashes, chunk=chunk, mask_mod=mod,
                                 return_buckets=True)
    mask = materialize_heads(mod, B, H, L)
    if chunk >= L // 2:
        assert lsh_union_mask(buckets, chunk).all()
    else:
        mask = mask & lsh_union_mask(buckets, chunk)
    assert_same_with_gradients(out, shared_qk_attention(qk, v, mask), (qk, v))


@pytest.mark.parametrize("n_buckets,n_hashes,chunk,across", [(4, 1, 8, False), (4, 3, 8, False), (8, 4, 5, False),
                                                             (4, 2, 7, True)])
@pytest.mark.parametrize("family", ["tta", "gpt"])
def test_many_buckets_equal_dense_attention_over_the_rounds_candidates(n_buckets, n_hashes, chunk, across, family):
    """Several rounds combine into exactly softmax attention over the union of their candidates (each pair once),
    under the family mask."""
    qk, v = tensors(1)
    structure = no_diagonal() if family == "tta" else causal()
    mod = and_masks(structure, padding(ATTENTION_MASK))
    out, buckets = lsh_attention(qk, v, n_buckets, n_hashes, chunk, mod, attend_across_buckets=across,
                                 generator=torch.Generator().manual_seed(5), return_buckets=True)
    union = lsh_union_mask(buckets, chunk, across)
    assert 0.1 < union.float().mean() < 1.0  # the buckets do restrict attention
    assert_same_with_gradients(out, shared_qk_attention(qk, v, union & materialize_heads(mod, B, H, L)), (qk, v))


def test_the_same_generator_gives_the_same_buckets():
    qk, v = tensors()
    _, a = lsh_attention(qk, v, 4, 2, 8, generator=torch.Generator().manual_seed(0), return_buckets=True)
    _, b = lsh_attention(qk, v, 4, 2, 8, generator=torch.Generator().manual_seed(0), return_buckets=True)
    _, c = lsh_attention(qk, v, 4, 2, 8, generator=torch.Generator().manual_seed(1), return_buckets=True)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_under_tta_a_token_never_attends_to_itself_and_lone_rows_are_zero():
    qk, v = tensors()
    # value probe: v = one-hot of the position, so the output's weight on position i is out[..., i]
    probe = torch.eye(L).expand(B, H, L, L)
    out = lsh_attention(qk.detach(), probe, 4, 2, 5, no_diagonal(), generator=torch.Generator().manual_seed(0))
    assert torch.all(out.diagonal(dim1=-2, dim2=-1) == 0)
    # one chunk of one token: under T-TA nothing is left, and the row is zero, not NaN
    lone = lsh_attention(qk[:, :, :1], v[:, :, :1], 1, 1, 1, no_diagonal())
    assert torch.equal(lone, torch.zeros_like(lone))


def test_reformers_self_rule_is_a_separate_switch():
    qk, v = tensors()
    probe = torch.eye(L).expand(B, H, L, L)
    with_self = lsh_attention(qk.detach(), probe, 8, 1, 4, generator=torch.Generator().manual_seed(0))
    rule = lsh_attention(qk.detach(), probe, 8, 1, 4, exclude_self=True, generator=torch.Generator().manual_seed(0),
                         return_buckets=True)
    out, buckets = rule
    alone = lsh_union_mask(buckets, 4).sum(-1) == 1  # rows whose only candidate is themselves
    diag = out.diagonal(dim1=-2, dim2=-1)
    assert alone.any() and (~alone).any()
    torch.testing.assert_close(diag[alone], torch.ones_like(diag[alone]))  # nothing else: itself
    assert diag[~alone].max() < 1e-6  # anything else: not itself (exp(-1e5) is 0)
    assert with_self.diagonal(dim1=-2, dim2=-1)[~alone].mean() > 0.1  # without the rule shared QK favours itself


def test_rotations_are_checked():
    with pytest.raises(ValueError):
        random_rotations(D, H, n_buckets=3, n_hashes=1)


def tta_lsh(mod):
    rotations = random_rotations(4, 2, n_buckets=2, n_hashes=2, generator=torch.Generator().manual_seed(0))
    # T-TA: the queries are the query stream; the keys (the embedding stream) do the hashing
    return lambda q, k, v: lsh_attention(k, v, 2, 2, 3, mod, query=q, rotations=rotations)


def test_tta_no_gradient_leak_under_lsh():
    norms = self_gradients(tta_lsh(no_diagonal()))
    assert torch.all(norms.diagonal(dim1=-2, dim2=-1) == 0)
    assert norms.sum() > 0
    leaky = self_gradients(tta_lsh(None))  # without T-TA's mask the same stack leaks: the test can fail
    assert (leaky.diagonal(dim1=-2, dim2=-1) > 0).any()


def test_lsh_routing_does_depend_on_token_i_under_tta():
    """The documented limit: no gradient, but token i picks the bucket that query i is routed by."""
    g = torch.Generator().manual_seed(0)
    n = 16
    x = torch.randn(1, 1, n, 4, generator=g)
    positions = torch.randn(1, 1, n, 4, generator=g)  # T-TA's query stream: no token in it
    rotations = random_rotations(4, 1, n_buckets=4, n_hashes=1, generator=g)
    changed_lsh, changed_dense = [], []
    for i in range(n):
        y = x.clone()
        y[0, 0, i] = -x[0, 0, i]  # the opposite direction: another bucket
        for attend, changed in ((lambda t: lsh_attention(t, t, 4, 1, 4, no_diagonal(), query=positions,
                                                         rotations=rotations), changed_lsh),
                                (lambda t: shared_qk_attention(t, t, ~torch.eye(n, dtype=torch.bool),
                                                               query=positions), changed_dense)):
            changed.append(not torch.allclose(attend(x)[0, 0, i], attend(y)[0, 0, i]))
    assert not any(changed_dense)  # dense T-TA attention: output i ignores token i
    assert any(changed_lsh)  # LSH T-TA attention: it does not


def block(dim: int, seed: int) -> ReversibleBlock:
    torch.manual_seed(seed)

    def sub() -> nn.Module:
        return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(0.2),
                             nn.Linear(2 * dim, dim))

    return ReversibleBlock(sub(), sub())


def run(seq: ReversibleSequence, x1, x2):
    torch.manual_seed(123)  # the same dropout draws for both runs
    y1, y2 = seq(x1, x2)
    return y1, y2


def test_reversible_gradients_equal_the_plain_blocks():
    blocks = [block(8, s) for s in range(3)]
    seq = ReversibleSequence(blocks).train()
    g = torch.Generator().manual_seed(0)
    x1, x2 = (torch.randn(2, 5, 8, generator=g, requires_grad=True) for _ in range(2))
    inputs = (x1, x2, *seq.parameters())
    direction = [torch.randn(2, 5, 8, generator=g) for _ in range(2)]

    seq.reversible = False
    plain = run(seq, x1, x2)
    want = torch.autograd.grad(plain, inputs, direction)
    seq.reversible = True
    rev = run(seq, x1, x2)
    got = torch.autograd.grad(rev, inputs, direction)
    for a, b in zip(rev, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert len(got) == 2 + sum(1 for _ in seq.parameters())
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_reversible_recomputes_with_the_forwards_dropout():
    """Without restoring the random state, backward would recompute other dropout masks: the gradients would
    differ (this is what the test above would catch)."""
    seq = ReversibleSequence([block(8, 0)]).train()
    x1, x2 = (torch.randn(2, 5, 8, requires_grad=True) for _ in range(2))
    torch.manual_seed(1)
    a = torch.autograd.grad(sum(t.sum() for t in seq(x1, x2)), (x1, x2))
    torch.manual_seed(2)
    b = torch.autograd.grad(sum(t.sum() for t in seq(x1, x2)), (x1, x2))
    assert not torch.allclose(a[0], b[0])  # dropout does change gradients: the equality test is not vacuous


def test_reversible_keeps_only_the_outputs():
    seq = ReversibleSequence([block(8, s) for s in range(4)]).eval()
    x1, x2 = (torch.randn(2, 5, 8, requires_grad=True) for _ in range(2))
    counts = {}
    for reversible in (True, False):
        seq.reversible = reversible
        saved: list[torch.Tensor] = []

        def pack(t: torch.Tensor, saved: list[torch.Tensor] = saved) -> torch.Tensor:
            saved.append(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            seq(x1, x2)
        counts[reversible] = len(saved)
    assert counts[True] == 2  # y1, y2 of the last block
    assert counts[False] > 4 * 8


@pytest.mark.parametrize("chunk", [1, 4, 7, 100])
def test_chunked_feed_forward_equals_the_plain_one(chunk):
    torch.manual_seed(0)
    ffn = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
    h = torch.randn(3, 17, 8, requires_grad=True)
    out = ChunkedFeedForward(ffn, chunk)(h)
    want = ffn(h)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=0)
    inputs = (h, *ffn.parameters())
    for a, b in zip(torch.autograd.grad(out.sum(), inputs), torch.autograd.grad(want.sum(), inputs), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    with pytest.raises(ValueError):
        chunked_feed_forward(ffn, h, 0)
