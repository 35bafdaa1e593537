"""The disentangled score bias read through one-hot matrix products (attention/disentangled.py, bias_kernel =
"one-hot") gives torch.gather's values and gradients: for a bare bias over random queries and keys, and for a whole
GPT-BERT recipe training step (loss and every parameter's gradient). FlexAttention instead of a bias:
tests/nn/test_flex_attention.py."""

from __future__ import annotations

import pytest
import torch

from maskplay.config import ModelConfig
from maskplay.families import build_model
from maskplay.nn.attention import disentangled
from maskplay.nn.positions import log_bucket


@pytest.fixture
def kernel(monkeypatch):
    def use(name: str) -> None:
        monkeypatch.setattr(disentangled, "bias_kernel", name)
    return use


def test_the_one_hot_bias_equals_the_gathered_one_with_its_gradients(kernel):
    torch.manual_seed(0)
    B, heads, L, buckets, d = 3, 2, 20, 9, 4
    position = torch.arange(L)
    index = (log_bucket(position[:, None] - position[None, :], 5, 12) + 4)[None]  # (1, L, L), in rows 0..8
    assert 0 <= int(index.min()) and int(index.max()) < buckets and index.unique().numel() >= 5
    q, k = torch.randn(B, heads, L, d, dtype=torch.float64), torch.randn(B, heads, L, d, dtype=torch.float64)
    pos_q, pos_k = torch.randn(buckets, heads * d, dtype=torch.float64), torch.randn(buckets, heads * d, dtype=torch.float64)
    weights = torch.randn(B, heads, L, L, dtype=torch.float64)
    results = {}
    for name in ("gather", "one-hot"):
        kernel(name)
        leaves = [t.clone().requires_grad_() for t in (q, k, pos_q, pos_k)]
        bias = disentangled.DisentangledScores(leaves[2], leaves[3], heads).bias(leaves[0], leaves[1], index)
        (bias * weights).sum().backward()
        results[name] = (bias.detach(), [t.grad for t in leaves])
    (gathered, grads_g), (hot, grads_h) = results["gather"], results["one-hot"]
    torch.testing.assert_close(hot, gathered, rtol=0, atol=1e-12)
    for a, b in zip(grads_h, grads_g, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    # and not by accident: the bias depends on which bucket each pair reads
    kernel("one-hot")
    shifted = disentangled.DisentangledScores(pos_q, pos_k, heads).bias(q, k, (index + 1) % buckets)
    assert not torch.allclose(shifted, hot)


def test_a_recipe_step_is_the_same_with_either_kernel(kernel, monkeypatch):
    one_hot, calls = disentangled.F.one_hot, []
    monkeypatch.setattr(disentangled.F, "one_hot", lambda *a: calls.append(1) or one_hot(*a))
    config = ModelConfig(family="gpt-bert", vocab_size=64, hidden_size=32, num_layers=2, num_heads=2,
                         intermediate_size=64, max_position=32, positions="disentangled", norm_placement="pre",
                         ffn="geglu", denseformer=True, hidden_dropout=0.0, attention_dropout=0.0)
    ids = torch.randint(7, 64, (4, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(4, 16, dtype=torch.bool)
    mask[1, 12:] = False
    runs = {}
    for name in ("gather", "one-hot"):
        kernel(name)
        torch.manual_seed(0)
        model = build_model(config).double().train()
        batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(2))
        loss = model(**batch).loss
        loss.backward()
        runs[name] = (loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    (loss_g, grads_g), (loss_h, grads_h) = runs["gather"], runs["one-hot"]
    assert len(calls) >= 2  # the one-hot run took that path in every layer
    torch.testing.assert_close(loss_h, loss_g, rtol=0, atol=1e-12)
    assert grads_h.keys() == grads_g.keys() and len(grads_g) > 10
    for name in grads_g:
        torch.testing.assert_close(grads_h[name], grads_g[name], rtol=0, atol=1e-10, msg=name)

