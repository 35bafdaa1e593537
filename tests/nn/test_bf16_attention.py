"""bf16 training on a CPU writes attention out (attention.dense.explicit_pays) instead of calling SDPA, whose CPU
flash kernel is several times slower there at short lengths. The written-out path is held to SDPA's (the oracle:
the same step with the switch's threshold at 0 keys) and to the leak tests' gradients, and it must really run."""

from __future__ import annotations

import pytest
import torch

import maskplay.nn.attention.dense as dense
from maskplay.families.unilm import UnilmConfig
from maskplay.runtime.precision import forward_in
from tests.conftest import padded_batch
from tests.test_leak import jacobian_norms


def step_grads(model, ids, mask):
    model.zero_grad(set_to_none=True)
    loss = forward_in(model, "bf16", **model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))).loss
    loss.backward()
    return loss.item(), {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "unilm", "gpt-bert"])
def test_written_out_attention_matches_sdpa_in_bf16_training(tiny_model, family, monkeypatch):
    # UniLM's mixed objective: plain rows have no [SEP] for its seq2seq one
    unilm = {"unilm": UnilmConfig("mixed")} if family == "unilm" else {}
    model = tiny_model(family, hidden_dropout=0.0, attention_dropout=0.0, **unilm).train()
    ids, mask = padded_batch([9, 6, 3])
    calls = []
    real = dense.F.scaled_dot_product_attention
    monkeypatch.setattr(dense.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    loss, grads = step_grads(model, ids, mask)
    assert not calls  # the written-out path ran
    monkeypatch.setattr(dense, "EXPLICIT_BF16_MAX_KEYS", 0)
    sdpa_loss, sdpa_grads = step_grads(model, ids, mask)
    assert calls  # and SDPA, for the oracle
    assert loss == pytest.approx(sdpa_loss, abs=0.02)
    assert grads.keys() == sdpa_grads.keys()
    scale = torch.stack([g.norm() for g in sdpa_grads.values()]).median()
    for name, g in grads.items():
        if sdpa_grads[name].norm() < 1e-3 * scale:  # zero in exact arithmetic (a key bias shifts a whole row)
            continue
        cosine = torch.nn.functional.cosine_similarity(g.flatten(), sdpa_grads[name].flatten(), dim=0)
        assert cosine > 0.99, (name, float(cosine))


def test_only_bf16_training_on_a_cpu_short_keys_takes_it():
    q = torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16, requires_grad=True)
    assert dense.explicit_pays(q, q)
    assert not dense.explicit_pays(q.detach(), q)  # no gradient: inference keeps SDPA
    assert not dense.explicit_pays(q.float(), q)  # fp32 is level: SDPA
    long = torch.zeros(1, 2, dense.EXPLICIT_BF16_MAX_KEYS + 1, 8, dtype=torch.bfloat16)
    assert not dense.explicit_pays(q, long)
    with torch.no_grad():
        assert not dense.explicit_pays(q, q)


@pytest.mark.parametrize("family", ["tta", "gpt"])
def test_no_leak_through_the_written_out_path(tiny_model, family, monkeypatch):
    """The leak tests' gradients on a bf16 model, where every attention call is written out (SDPA refused)."""
    monkeypatch.setattr(dense.F, "scaled_dot_product_attention", lambda *a, **k: pytest.fail("SDPA was called"))
    model = tiny_model(family).to(torch.bfloat16)
    ids, mask = padded_batch([7, 4])
    norms = jacobian_norms(model, ids, mask)
    if family == "tta":
        assert torch.all(torch.diagonal(norms, dim1=2, dim2=3) == 0)
        assert torch.all(norms[:, 0, :7, :7] + torch.eye(7) > 0)
    else:
        future = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
        assert torch.all(norms[:, :, future] == 0) and torch.all(norms[:, 0][:, ~future] > 0)
    assert torch.all(norms[:, 1, :4, 4:] == 0)  # padding never reaches a real output
