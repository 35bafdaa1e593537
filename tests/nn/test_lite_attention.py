"""Lite Transformer's long-short range attention (attention = "lsra", lite_attention.py) against a layer written out
with Python loops under every family's mask, its gradients (GPT causal, UniLM's prefix, T-TA at every depth in
tests/nn/test_arch_switches.py with the other shared path tests), parameters and errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from maskplay import preset
from maskplay.families import build_model
from maskplay.nn.attention.inputs import PassInputs
from maskplay.nn.masks import family_mask, materialize
from tests.conftest import padded_batch
from tests.nn.test_arch_switches import model_of
from tests.test_leak import jacobian_norms


def naive_lsra(layer, x, kv, mask):
    """The layer written out: attention on the first half of the channels (queries from x, keys/values from kv),
    the convolution on the second half of kv, tap by tap: the taps j with |j - i| <= c that the mask allows,
    weights softmax(w_h[j - i + c]) over those taps (zero output without any), then the output projection."""
    B, Lq, H = x.shape
    Lk = kv.shape[1]
    half, nh = H // 2, layer.conv.heads
    att, conv = layer.attention, layer.conv
    q = att.query(x[..., :half]).view(B, Lq, nh, -1)
    k = att.key(kv[..., :half]).view(B, Lk, nh, -1)
    v = att.value(kv[..., :half]).view(B, Lk, nh, -1)
    u = F.glu(conv.glu(kv[..., half:]), dim=-1).view(B, Lk, nh, -1)
    c = (conv.size - 1) // 2
    a_out = torch.zeros(B, Lq, nh, v.shape[-1])
    c_out = torch.zeros(B, Lq, nh, u.shape[-1])
    for b in range(B):
        for h in range(nh):
            for i in range(Lq):
                seen = [j for j in range(Lk) if mask[b, 0, i, j]]
                if seen:
                    scores = torch.stack([q[b, i, h] @ k[b, j, h] for j in seen]) / math.sqrt(q.shape[-1])
                    a_out[b, i, h] = sum(w * v[b, j, h] for w, j in zip(scores.softmax(0), seen, strict=True))
                taps = [j for j in range(i - c, i + c + 1) if 0 <= j < Lk and mask[b, 0, i, j]]
                if taps:
                    weights = torch.stack([conv.kernel[h, j - i + c] for j in taps]).softmax(0)
                    c_out[b, i, h] = sum(w * u[b, j, h] for w, j in zip(weights, taps, strict=True))
    return layer.out(torch.cat([a_out.reshape(B, Lq, -1), c_out.reshape(B, Lq, -1)], dim=-1))


def family_masks(L: int = 7):
    """Each family's mask (its structure AND the padding) for a batch of lengths 7 and 4, UniLM with a 3-token
    source in row 0 and a 2-token source in row 1; and one T-TA row of a single token (no allowed tap at all)."""
    _, real = padded_batch([L, 4])
    segments = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]])
    out = {name: materialize(family_mask(name, real, segment_ids=segments), 2, L)
           for name in ("bert", "gpt", "tta", "unilm")}
    _, lonely = padded_batch([L, 1])
    out["tta-one-token"] = materialize(family_mask("tta", lonely), 2, L)
    return out


@pytest.mark.parametrize("kernel", [1, 3, 5, 31])
@pytest.mark.parametrize("family", ["bert", "gpt", "tta", "unilm", "tta-one-token"])
def test_lsra_layer_is_the_written_out_layer(family, kernel):
    model = model_of("bert", attention="lsra", lsra_kernel=kernel)
    layer = model.encoder.layers[0].attn
    mask = family_masks()[family]
    torch.manual_seed(2)
    x = torch.randn(2, 7, 32)
    kv = torch.randn(2, 7, 32) if family.startswith("tta") else x  # T-TA: queries and keys/values are two streams
    with torch.no_grad():
        got = layer(x, PassInputs(mask, kv=None if kv is x else kv))
        want = naive_lsra(layer, x, kv, mask)
    real = mask.any(-1)[:, 0]  # rows with a key at all: the encoder zeroes the others (guard_empty_rows)
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)


def test_every_allowed_tap_gives_lite_transformers_normalised_kernel():
    """Away from the edges and under a bidirectional mask, each row's weights are softmax(w_h) over the K taps."""
    conv = model_of("bert", attention="lsra", lsra_kernel=5).encoder.layers[0].attn.conv
    L = 9
    mask = torch.ones(1, 1, L, L, dtype=torch.bool)
    columns = torch.arange(L)[None]
    from maskplay.nn.positions import PassPositions

    weights = conv.weights(mask, PassPositions(columns, columns))[0]
    for h in range(conv.heads):
        torch.testing.assert_close(weights[h, 4, 2:7], conv.kernel[h].softmax(0))
        assert weights[h, 4].sum().item() == pytest.approx(1.0) and weights[h, 4, :2].sum() == 0
        # at the first position only the taps 0..2 exist: renormalised over them
        torch.testing.assert_close(weights[h, 0, :3], conv.kernel[h, 2:].softmax(0))


def test_gpt_output_i_never_sees_a_later_token():
    model = model_of("gpt", attention="lsra", lsra_kernel=5)
    ids, mask = padded_batch([6, 4])
    norms = jacobian_norms(model, ids, mask)
    later = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert torch.all(norms[:, :, later] == 0), "GPT under lsra sees a later token"
    assert torch.all(norms[:, 0][:, ~later] > 0)  # and every earlier one, so that the test can fail


def test_unilm_source_never_sees_the_target():
    model = model_of("unilm", attention="lsra", lsra_kernel=7)
    ids, mask = padded_batch([6, 6])
    segments = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
    norms = jacobian_norms(model, ids, mask, token_type_ids=segments)
    assert torch.all(norms[:, :, :3, 3:] == 0), "a source token sees the target"
    target_after = torch.ones(3, 3, dtype=torch.bool).triu(1)
    assert torch.all(norms[:, :, 3:, 3:][:, :, target_after] == 0), "a target token sees a later one"
    assert torch.all(norms[:, :, 3:, :3] > 0)


def test_lsra_parameters():
    """Per layer: queries, keys and values at half the width, the GLU projection (H/2 -> H), the kernel (heads x K)
    and one H x H output, in place of attention's four H x H projections: 0.95 x the mini BERT's parameters."""
    cfg = preset("tiny", family="bert")
    H, nh, N = cfg.hidden_size, cfg.num_heads, cfg.num_layers
    lsra = build_model(preset("tiny", family="bert", attention="lsra", lsra_kernel=5)).num_parameters()
    half = H // 2
    per_layer = 3 * (half * half + half) + (half * H + H) + nh * 5 + (H * H + H) - 4 * (H * H + H)
    assert lsra - build_model(cfg).num_parameters() == N * per_layer
    mini = dict(vocab_size=16384)
    ratio = (build_model(preset("mini", family="bert", attention="lsra", **mini)).num_parameters()
             / build_model(preset("mini", family="bert", **mini)).num_parameters())
    assert ratio == pytest.approx(0.948, abs=1e-3)


def test_an_empty_row_has_no_nan_in_the_gradient():
    model = model_of("tta", attention="lsra", lsra_kernel=3).train()
    ids, mask = padded_batch([5, 1])
    out = model(**model.training_batch(ids, mask, torch.Generator().manual_seed(0)))
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_depth_growth_is_exact_and_width_growth_refused():
    from maskplay.tasks.grow import grow, largest_difference

    small = model_of("bert", attention="lsra", norm_placement="pre", lsra_kernel=3)
    grown = grow(small, layers=4)
    assert grown.exact and largest_difference(small, grown.model) < 1e-5
    with pytest.raises(ValueError, match="does not widen attention = 'lsra'"):
        grow(small, hidden=64)
