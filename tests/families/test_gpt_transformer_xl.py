"""GPT under Transformer-XL's own positions (positions = "transformer-xl", Dai et al. 2019): each attention layer
against the paper's score written out as a loop, (q_i + u) . k_j + (q_i + v) . W_r R(i - j), R the sinusoid of the
distance; the memory's keys at their distances before the segment. The leak, the cache and the two-segment step
are in tests/nn/test_positions.py and tests/tasks/train/test_memory_training.py."""

from __future__ import annotations

import math

import pytest
import torch

from maskplay import preset
from maskplay.config import LongAttentionConfig
from maskplay.families import MaskplayModel, build_model


def xl_gpt(seed: int = 0, **fields) -> MaskplayModel:
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family="gpt", positions="transformer-xl", **fields))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.25)  # u and v too: a zero bias would hide a term
    return model.eval()


def sinusoid_of(distance: int, width: int) -> torch.Tensor:
    """Transformer-XL's R(d): sin(d / 10000^(2k / width)) for k < width / 2, then the cosines."""
    angles = [distance / 10000 ** (2 * k / width) for k in range(width // 2)]
    return torch.tensor([math.sin(a) for a in angles] + [math.cos(a) for a in angles])


def naive_attention(attn, x: torch.Tensor, memory: torch.Tensor | None, heads: int) -> torch.Tensor:
    """One layer's attention output for queries x (B, L, H) over keys [memory; x], causal, as loops over heads and
    query/key pairs; the memory's M keys sit at positions -M..-1, the queries at 0..L-1."""
    source = x if memory is None else torch.cat([memory, x], dim=1)
    B, L, H = x.shape
    M = source.shape[1] - L
    d = H // heads
    rel = attn.relative
    q, k, v = attn.query(x), attn.key(source), attn.value(source)
    out = torch.zeros(B, L, H)
    for b in range(B):
        for h in range(heads):
            cut = slice(h * d, (h + 1) * d)
            for i in range(L):
                scores = []
                for j in range(M + i + 1):  # every memory key, then the segment's keys up to i
                    r = rel.project(sinusoid_of(i - (j - M), H))[cut]
                    qi = q[b, i, cut]
                    scores.append(((qi + rel.content_bias[h]) @ k[b, j, cut]
                                   + (qi + rel.position_bias[h]) @ r) / math.sqrt(d))
                p = torch.stack(scores).softmax(0)
                out[b, i, cut] = p @ v[b, :M + i + 1, cut]
    return attn.out(out)


@pytest.mark.parametrize("memory", [0, 3])
def test_each_layer_attends_as_transformer_xls_formula(memory):
    model = xl_gpt()
    g = torch.Generator().manual_seed(1)
    first, ids = torch.randint(7, 100, (2, 4), generator=g), torch.randint(7, 100, (2, 5), generator=g)
    seen = []
    hooks = [layer.attn.register_forward_hook(lambda m, args, out: seen.append((m, args[0], out)))
             for layer in model.encoder.layers]
    try:
        with torch.no_grad():
            mems = model(first, memory_length=memory).mems if memory else None
            seen.clear()
            model(ids, mems=mems, memory_length=memory or None)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(seen) == model.config.num_layers
    for index, (attn, x, got) in enumerate(seen):
        with torch.no_grad():
            want = naive_attention(attn, x, None if mems is None else mems[index], model.config.num_heads)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_its_layers_have_u_v_and_w_r_and_no_segment_term():
    model = xl_gpt()
    names = {n.split("relative.")[1] for n, _ in model.named_parameters() if "relative." in n}
    assert names == {"project.weight", "content_bias", "position_bias"}
    assert not any("position" in n for n, _ in model.embeddings.named_parameters())  # no absolute table
    ids = torch.randint(7, 100, (2, 6))
    model.train()(ids, labels=ids).loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_xlnet_keeps_its_segment_term():
    model = build_model(preset("tiny", family="xlnet"))
    assert any(n.endswith("relative.segment_embed") for n, _ in model.named_parameters())


@pytest.mark.parametrize("fields, message", [
    (dict(attention="synthesizer-dense"), "no queries and keys"),
    (dict(attention="lsra"), "not built with positions = 'transformer-xl'"),
    (dict(long=LongAttentionConfig(window=4)), "positions = 'transformer-xl'"),
])
def test_what_it_refuses(fields, message):
    with pytest.raises(ValueError, match=message):
        preset("tiny", family="gpt", positions="transformer-xl", **fields)


def test_no_output_reads_a_later_token_with_memory():
    """The gradient leak test (tests/test_leak.py) on a segment that reads memory: output i depends on the
    segment's tokens up to i, never on a later one."""
    from tests.test_leak import jacobian_norms

    model = xl_gpt()
    g = torch.Generator().manual_seed(2)
    first, ids = torch.randint(7, 100, (2, 4), generator=g), torch.randint(7, 100, (2, 6), generator=g)
    with torch.no_grad():
        mems = model(first, memory_length=8).mems
    norms = jacobian_norms(model, ids, torch.ones_like(ids, dtype=torch.bool), mems=mems, memory_length=8)
    future = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    assert torch.all(norms[:, :, future] == 0)
    assert torch.all(norms[:, :, ~future] > 0)


def test_grow_deepens_it_exactly_and_refuses_to_widen_it():
    from maskplay.tasks.grow import grow, largest_difference

    model = xl_gpt(norm_placement="pre")
    grown = grow(model, layers=4)
    assert grown.exact and largest_difference(model, grown.model) < 1e-5
    with pytest.raises(ValueError, match="does not widen positions = 'transformer-xl'"):
        grow(model, hidden=64, heads=8)
