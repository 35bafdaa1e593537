"""No information leak, proved by gradients: T-TA's output at i never depends on token i at any depth;
GPT's output at i never depends on a later token."""

import pytest
import torch

from tests.conftest import padded_batch


def jacobian_norms(model, ids, mask, **kwargs):
    """norms[depth, b, i, j] = || d out_depth[b, i] / d token_embedding[b, j] ||, every depth incl. logits."""
    captured = {}

    def hook(module, inputs, output):
        if "emb" not in captured:  # the first lookup is of the input tokens (T-TA's second is of [MASK])
            output.requires_grad_(True)
            captured["emb"] = output
            return output

    handle = model.embeddings.word.register_forward_hook(hook)
    out = model(ids, attention_mask=mask, output_hidden_states=True, **kwargs)
    handle.remove()
    emb = captured["emb"]
    outputs = list(out.hidden_states[1:]) + [out.logits]
    B, L = ids.shape
    norms = torch.zeros(len(outputs), B, L, L)
    g = torch.Generator().manual_seed(0)
    for d, o in enumerate(outputs):
        # a random direction, not .sum(): the sum of a LayerNorm output is constant and has zero gradient
        direction = torch.randn(o.shape[-1], generator=g).to(o.dtype)
        for b in range(B):
            for i in range(L):
                (grad,) = torch.autograd.grad(o[b, i] @ direction, emb, retain_graph=True)
                norms[d, b, i] = grad[b].norm(dim=-1)
                assert grad[1 - b].abs().sum() == 0 if B == 2 else True  # no leak across the batch either
    return norms



def assert_tta_reads_all_but_itself(norms, mask, label):
    """T-TA's leak check at every depth: output i never depends on token i, every other real token reaches it, and
    padding reaches nothing."""
    assert torch.all(torch.diagonal(norms, dim1=2, dim2=3) == 0), f"T-TA leaks token i into output i ({label})"
    for b, n in enumerate(mask.sum(1).tolist()):
        assert torch.all(norms[:, b, :n, :n] + torch.eye(n) > 0)  # every other token does reach output i
        assert torch.all(norms[:, b, :, n:] == 0)

@pytest.fixture
def batch():
    return padded_batch([7, 4])


def test_tta_output_i_never_sees_token_i(tiny_model, batch):
    ids, mask = batch
    norms = jacobian_norms(tiny_model("tta"), ids, mask)
    diag = torch.diagonal(norms, dim1=2, dim2=3)
    assert torch.all(diag == 0), "T-TA leaks token i into output i"
    # and it does see every other real token, so the test is not vacuous
    for b, n in enumerate(mask.sum(1).tolist()):
        off = norms[:, b, :n, :n] + torch.eye(n)
        assert torch.all(off > 0)
        assert torch.all(norms[:, b, :, n:] == 0), "padding leaks into real outputs"


def test_the_leak_test_fails_without_the_diagonal_mask(tiny_model, batch):
    ids, mask = batch
    norms = jacobian_norms(tiny_model("tta"), ids, mask, diagonal_mask=False)
    diag = torch.diagonal(norms, dim1=2, dim2=3)[:, 0, :7]
    assert torch.all(diag > 0)


def test_gpt_output_i_never_sees_later_tokens(tiny_model, batch):
    ids, mask = batch
    norms = jacobian_norms(tiny_model("gpt"), ids, mask)
    future = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
    assert torch.all(norms[:, :, future] == 0)
    assert torch.all(norms[:, 0][:, ~future] > 0)  # the past and the token itself do reach output i


def test_bert_sees_everything(tiny_model, batch):
    ids, mask = batch
    norms = jacobian_norms(tiny_model("bert"), ids, mask)
    assert torch.all(norms[:, 0] > 0)
