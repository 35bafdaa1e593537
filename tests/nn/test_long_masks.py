"""Long-text mask patterns (maskplay.nn.attention.long_masks) against brute-force Python loops, their composition with the
family masks, and T-TA's no-leak property under each of them on a small two-stream attention stack."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from maskplay.nn.attention.long_masks import (
    bigbird,
    block_window,
    dilated_sliding_window,
    global_flags,
    global_tokens,
    materialize_heads,
    random_block_table,
    sliding_window,
)
from maskplay.nn.masks import and_masks, causal, materialize, no_diagonal, or_masks, padding

L = 23  # not a multiple of any block or window size below


def loop_mask(rule, batch: int = 1, heads: int = 1, n: int = L) -> torch.Tensor:
    return torch.tensor([[[[bool(rule(b, h, i, j)) for j in range(n)] for i in range(n)] for h in range(heads)]
                         for b in range(batch)])


@pytest.mark.parametrize("w", [0, 1, 3, 30])
def test_sliding_window_matches_loop(w):
    got = materialize(sliding_window(w), 1, L)
    assert torch.equal(got, loop_mask(lambda b, h, i, j: abs(i - j) <= w))


def test_causal_window_is_window_and_causal():
    got = materialize(and_masks(sliding_window(3), causal()), 1, L)
    assert torch.equal(got, loop_mask(lambda b, h, i, j: 0 <= i - j <= 3))


@pytest.mark.parametrize("w,d", [(2, 1), (2, 3), (4, 2)])
def test_dilated_window_matches_loop(w, d):
    got = materialize(dilated_sliding_window(w, d), 1, L)
    assert torch.equal(got, loop_mask(lambda b, h, i, j: any(j == i + k * d for k in range(-w, w + 1))))


def test_dilation_per_head():
    dil = [1, 2, 3]
    got = materialize_heads(dilated_sliding_window(2, dil), 1, 3, L)
    want = loop_mask(lambda b, h, i, j: any(j == i + k * dil[h] for k in range(-2, 3)), heads=3)
    assert torch.equal(got, want)
    assert not torch.equal(got[0, 0], got[0, 1])


def test_global_tokens_from_positions_and_flags_match_loop():
    positions = torch.tensor([[0, 5], [7, -1]])  # row 1 has one global token
    glob = {0: {0, 5}, 1: {7}}
    want = loop_mask(lambda b, h, i, j: abs(i - j) <= 1 or i in glob[b] or j in glob[b], batch=2)
    from_positions = materialize(or_masks(sliding_window(1), global_tokens(positions, L)), 2, L)
    flags = global_flags(positions, L)
    from_flags = materialize(or_masks(sliding_window(1), global_tokens(flags)), 2, L)
    assert torch.equal(from_positions, want)
    assert torch.equal(from_flags, want)
    assert flags.sum().item() == 3


def test_global_positions_are_checked():
    with pytest.raises(ValueError):
        global_tokens(torch.tensor([[L]]), L)
    with pytest.raises(ValueError):
        global_tokens(torch.tensor([[0]]))  # indices without seq_len


def test_block_window_matches_loop():
    got = materialize(block_window(4, radius=1), 1, L)
    assert torch.equal(got, loop_mask(lambda b, h, i, j: abs(i // 4 - j // 4) <= 1))


def test_bigbird_matches_loop_and_is_reproducible():
    bs, r, heads = 4, 2, 2
    table = random_block_table(L, bs, r, heads=heads, generator=torch.Generator().manual_seed(3))
    nb = table.shape[-1]
    assert nb == 6
    # each query block draws exactly r blocks, all outside its window
    assert torch.equal(table.sum(-1), torch.full((heads, nb), r))
    assert not any(table[h, i, j] for h in range(heads) for i in range(nb) for j in range(nb) if abs(i - j) <= 1)
    glob = torch.tensor([[0]])
    mod = bigbird(L, bs, r, global_positions=glob, heads=heads, generator=torch.Generator().manual_seed(3))
    want = loop_mask(lambda b, h, i, j: abs(i // bs - j // bs) <= 1 or bool(table[h, i // bs, j // bs])
                     or i == 0 or j == 0, heads=heads)
    got = materialize_heads(mod, 1, heads, L)
    assert torch.equal(got, want)
    again = materialize_heads(bigbird(L, bs, r, glob, heads=heads, generator=torch.Generator().manual_seed(3)),
                              1, heads, L)
    other = materialize_heads(bigbird(L, bs, r, glob, heads=heads, generator=torch.Generator().manual_seed(4)),
                              1, heads, L)
    assert torch.equal(got, again)
    assert not torch.equal(got, other)


def test_random_blocks_where_few_blocks_lie_outside_the_window():
    table = random_block_table(12, 4, 5, generator=torch.Generator().manual_seed(0))  # 3 blocks: 0 and 2 only
    assert table[0].tolist() == [[False, False, True], [False, False, False], [True, False, False]]


PATTERNS = {
    "window": lambda: sliding_window(2),
    "causal-window": lambda: and_masks(sliding_window(2), causal()),
    "dilated": lambda: dilated_sliding_window(2, [1, 2]),
    "window+global": lambda: or_masks(sliding_window(1), global_tokens(torch.tensor([[0, 4], [3, -1]]), 9)),
    "bigbird": lambda: bigbird(9, 2, 1, torch.tensor([[0], [8]]), heads=2, generator=torch.Generator().manual_seed(0)),
}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_no_diagonal_keeps_the_diagonal_false_under_every_pattern(name):
    attention_mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    mask = materialize_heads(and_masks(PATTERNS[name](), no_diagonal(), padding(attention_mask)), 2, 2, 9)
    assert not mask.diagonal(dim1=-2, dim2=-1).any()
    assert not mask[1, :, :, 6:].any()  # padding keys stay hidden
    # and the pattern does allow something besides (row 0 of a causal window has nothing left: it sees only
    # itself): the composition is not vacuous
    assert mask.any(-1)[:, :, 1:6].all()


class TwoStreamStack(torch.nn.Module):
    """T-TA's attention in miniature (families/tta.py): queries start from a position-only stream, keys and
    values are projections of the embedding stream X in every layer."""

    def __init__(self, dim: int = 8, heads: int = 2, layers: int = 2, length: int = 9) -> None:
        super().__init__()
        self.heads = heads
        self.query_start = torch.nn.Parameter(torch.randn(length, dim))
        self.q = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(layers))
        self.kv = torch.nn.ModuleList(torch.nn.Linear(dim, 2 * dim) for _ in range(layers))
        self.ffn = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(),
                                                           torch.nn.Linear(2 * dim, dim)) for _ in range(layers))

    def forward(self, x: torch.Tensor, attend) -> list[torch.Tensor]:
        B, n, D = x.shape
        nh = self.heads
        h = self.query_start[:n].expand(B, n, D)
        outs = []
        for q_proj, kv_proj, ffn in zip(self.q, self.kv, self.ffn, strict=True):
            q = q_proj(h).view(B, n, nh, -1).transpose(1, 2)
            k, v = (t.view(B, n, nh, -1).transpose(1, 2) for t in kv_proj(x).chunk(2, dim=-1))
            h = F.layer_norm(h + attend(q, k, v).transpose(1, 2).reshape(B, n, D), (D,))
            h = F.layer_norm(h + ffn(h), (D,))
            outs.append(h)
        return outs


def dense_attend(mask: torch.Tensor):
    def attend(q, k, v):
        dead = ~mask.any(-1, keepdim=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask | dead).masked_fill(dead, 0.0)

    return attend


def self_gradients(attend, batch: int = 2, n: int = 9) -> torch.Tensor:
    """norms[depth, b, i, j] = |d out_depth[b, i] . u / d x[b, j]| for a random direction u."""
    torch.manual_seed(0)
    stack = TwoStreamStack(length=n)
    x = torch.randn(batch, n, 8, requires_grad=True)
    outs = stack(x, attend)
    u = torch.randn(8)
    norms = torch.zeros(len(outs), batch, n, n)
    for d, o in enumerate(outs):
        for b in range(batch):
            for i in range(n):
                (g,) = torch.autograd.grad(o[b, i] @ u, x, retain_graph=True)
                norms[d, b, i] = g[b].norm(dim=-1)
    return norms


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_tta_no_leak_under_every_pattern(name):
    mask = materialize_heads(and_masks(PATTERNS[name](), no_diagonal()), 2, 2, 9)
    norms = self_gradients(dense_attend(mask))
    assert torch.all(norms.diagonal(dim1=-2, dim2=-1) == 0), f"token i reaches output i under {name}"
    assert norms.sum() > 0
    # the same stack without T-TA's diagonal mask does leak: the test can fail
    leaky = self_gradients(dense_attend(materialize_heads(PATTERNS[name](), 2, 2, 9)))
    assert torch.all(leaky.diagonal(dim1=-2, dim2=-1) > 0)
