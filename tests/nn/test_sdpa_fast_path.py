"""SDPA told the mask's kind (masks.sdpa_kind -> attention.dense.sdpa_known): is_causal for GPT (and GPT-BERT, UniLM
rows) with no padding or right padding in training, no mask for BERT without padding. The oracle is the same step
with the materialised mask (sdpa_kind patched to None): loss, the logits at every real position and every gradient
equal to 1e-5 in fp32, and the fast call must really run (a spy on SDPA's arguments)."""

from __future__ import annotations

import pytest
import torch

import maskplay.families.tta as tta
import maskplay.nn.attention.dense as dense
import maskplay.nn.modeling as modeling
from maskplay.nn.masks import bidirectional, causal, no_diagonal, sdpa_kind
from tests.conftest import padded_batch


def spy_sdpa(monkeypatch) -> list[str]:
    """Each SDPA call's form: "causal", "none" (no mask) or "mask"."""
    calls: list[str] = []
    real = dense.F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append("causal" if kwargs.get("is_causal") else "mask" if kwargs.get("attn_mask") is not None
                     else "none")
        return real(*args, **kwargs)

    monkeypatch.setattr(dense.F, "scaled_dot_product_attention", spy)
    return calls


def step(model, ids, mask, **extra):
    """Loss, the logits at the labelled positions and every gradient of one fp32 training step."""
    model.zero_grad(set_to_none=True)
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    out = model(**batch, **extra)
    out.loss.backward()
    return out.loss.detach(), out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                                     if p.grad is not None}


def assert_same(fast, slow):
    assert torch.allclose(fast[0], slow[0], atol=1e-5, rtol=0)
    assert torch.allclose(fast[1], slow[1], atol=1e-5, rtol=0)
    assert fast[2].keys() == slow[2].keys()
    for name, grad in fast[2].items():
        assert torch.allclose(grad, slow[2][name], atol=1e-5, rtol=1e-5), name


def test_kind_is_decided_from_the_structure_and_the_padding():
    full = torch.ones(2, 4, dtype=torch.bool)
    right = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    left = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    assert sdpa_kind(causal(), full, training=False) == "causal"
    assert sdpa_kind(bidirectional(), full, training=False) == "full"
    assert sdpa_kind(causal(), right, training=True) == "causal"
    assert sdpa_kind(causal(), right, training=False) is None  # padding outputs are read at inference
    assert sdpa_kind(causal(), left, training=True) is None  # left padding: early queries see no real key
    assert sdpa_kind(bidirectional(), right, training=True) is None  # padding keys must stay hidden
    assert sdpa_kind(no_diagonal(), full, training=True) is None
    assert sdpa_kind(lambda b, h, q, kv: kv <= q, full, training=True) is None  # only the known functions


@pytest.mark.parametrize("family, lengths, kind", [
    ("gpt", [9, 9, 9], "causal"),
    ("gpt", [9, 6, 3], "causal"),  # right padding, training
    ("bert", [9, 9, 9], "none"),
    ("bert", [9, 6, 3], "mask"),  # padding keys: the mask as it is
])
def test_fast_path_equals_the_masked_path(tiny_model, family, lengths, kind, monkeypatch):
    model = tiny_model(family, hidden_dropout=0.0, attention_dropout=0.0).train()
    ids, mask = padded_batch(lengths)
    calls = spy_sdpa(monkeypatch)
    fast = step(model, ids, mask)
    assert calls and set(calls) == {kind}
    calls.clear()
    monkeypatch.setattr(modeling, "sdpa_kind", lambda *a: None)
    slow = step(model, ids, mask)
    assert set(calls) == {"mask"}
    assert_same(fast, slow)


@pytest.mark.parametrize("share, kind", [(1.0, "causal"), (0.0, "none"), (0.5, "mask")])
def test_gpt_bert_whole_batch_modes(tiny_model, share, kind, monkeypatch):
    from maskplay.families.gpt_bert import GptBertConfig

    model = tiny_model("gpt-bert", hidden_dropout=0.0, attention_dropout=0.0,
                       gpt_bert=GptBertConfig(causal_share=share)).train()
    ids, mask = padded_batch([9, 9, 9, 9])
    calls = spy_sdpa(monkeypatch)
    fast = step(model, ids, mask)
    assert set(calls) == {kind}
    monkeypatch.setattr(modeling, "sdpa_kind", lambda *a: None)
    assert_same(fast, step(model, ids, mask))


def test_tta_downstream_mode_without_padding(tiny_model, monkeypatch):
    """T-TA's own mask (no diagonal) keeps its mask; its downstream mode (diagonal_mask=False) runs unmasked."""
    model = tiny_model("tta", hidden_dropout=0.0, attention_dropout=0.0).train()
    ids, mask = padded_batch([9, 9])
    calls = spy_sdpa(monkeypatch)
    step(model, ids, mask)
    assert set(calls) == {"mask"}
    calls.clear()
    fast = step(model, ids, mask, diagonal_mask=False)
    assert set(calls) == {"none"}
    monkeypatch.setattr(tta, "sdpa_kind", lambda *a: None)
    assert_same(fast, step(model, ids, mask, diagonal_mask=False))


def test_a_position_bias_keeps_the_mask(tiny_model, monkeypatch):
    """ALiBi folds its bias into the mask: nothing may drop it."""
    model = tiny_model("gpt", hidden_dropout=0.0, attention_dropout=0.0, positions="alibi").train()
    ids, mask = padded_batch([9, 9])
    calls = spy_sdpa(monkeypatch)
    step(model, ids, mask)
    assert set(calls) == {"mask"}
