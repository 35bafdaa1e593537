import itertools

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention

from maskplay.nn import masks
from maskplay.nn.attention.dense import guard_empty_rows


def naive(rule, B, L):
    out = torch.zeros(B, 1, L, L, dtype=torch.bool)
    for b, i, j in itertools.product(range(B), range(L), range(L)):
        out[b, 0, i, j] = rule(b, i, j)
    return out


def test_structural_masks_match_their_definitions():
    L = 6
    cases = {
        masks.bidirectional(): lambda b, i, j: True,
        masks.causal(): lambda b, i, j: j <= i,
        masks.no_diagonal(): lambda b, i, j: i != j,
    }
    for mod, rule in cases.items():
        assert torch.equal(masks.materialize(mod, 2, L), naive(rule, 2, L))


def test_padding_hides_keys_only_and_combines_with_and():
    attn = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    got = masks.materialize(masks.family_mask("tta", attn), 2, 5)
    want = naive(lambda b, i, j: bool(attn[b, j]) and i != j, 2, 5)
    assert torch.equal(got, want)


def test_prefix_lm_from_segments():
    seg = torch.tensor([[0, 0, 0, 1, 1, 1]])
    got = masks.materialize(masks.prefix_lm(seg), 1, 6)
    want = naive(lambda b, i, j: (seg[b, j] == 0) or (seg[b, i] == 1 and j <= i), 1, 6)
    assert torch.equal(got, want)
    assert not got[0, 0, 0, 3]  # the source never sees the target


def test_permutation_streams_follow_the_order():
    g = torch.Generator().manual_seed(3)
    rank = masks.random_rank(torch.tensor([5, 3]), 5, generator=g)
    assert sorted(rank[0].tolist()) == list(range(5))
    assert set(rank[1, 3:].tolist()) == {3, 4}  # padding comes last in the order
    content = masks.materialize(masks.permutation_content(rank), 2, 5)
    query = masks.materialize(masks.permutation_query(rank), 2, 5)
    assert torch.equal(content, naive(lambda b, i, j: rank[b, j] <= rank[b, i], 2, 5))
    assert torch.equal(query, naive(lambda b, i, j: rank[b, j] < rank[b, i], 2, 5))
    assert torch.equal(content & ~query, torch.eye(5, dtype=torch.bool).expand(2, 1, 5, 5))


def test_or_masks():
    mod = masks.or_masks(masks.causal(), masks.no_diagonal())
    assert masks.materialize(mod, 1, 4).all()


def test_fully_masked_rows_give_zeros_not_nan():
    rank = torch.tensor([[2, 0, 1, 3]])
    mask = masks.materialize(masks.permutation_query(rank), 1, 4)
    assert not mask[0, 0, 1].any()  # the first token of the order sees nothing
    q = k = v = torch.randn(1, 2, 4, 8)
    safe, dead = guard_empty_rows(mask)
    out = scaled_dot_product_attention(q, k, v, attn_mask=safe).masked_fill(dead, 0.0)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0, :, 1], torch.zeros(2, 8))


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="unknown mask family 'nope'"):
        masks.family_mask("nope", torch.ones(1, 3))
    with pytest.raises(ValueError, match="needs segment_ids"):
        masks.family_mask("unilm", torch.ones(1, 3))
