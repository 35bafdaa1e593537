"""DenseFormer's buffered stream (nn/denseformer.py) against the multiply-add loop autograd differentiates itself, and
against the list stream in whole models: the values, every gradient, a retained graph run twice, a loss on an
intermediate state."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from maskplay import preset
from maskplay.families import build_model
from maskplay.nn.denseformer import BufferedStream, DepthWeights, ListStream
from tests.conftest import padded_batch

SUBLAYERS = 4
NO_DROPOUT = {"hidden_dropout": 0.0, "attention_dropout": 0.0}


def _chain(x0, weights, dense, buffered):  # noqa: ANN001, ANN202
    """Sub-layers x_{n+1} = h + tanh(h W_n) with DenseFormer's average after each, through a stream or the loop."""
    if buffered is None:
        outputs, h = [x0], x0
        for n, w in enumerate(weights):
            outputs.append(h + torch.tanh(h @ w))
            h = sum(a * y for a, y in zip(dense.alphas[n], outputs, strict=True))
        return h
    stream, h = dense.stream(x0, buffered=buffered), x0
    for w in weights:
        h = stream.add(h + torch.tanh(h @ w))
    return h


def _setup():  # noqa: ANN202
    torch.manual_seed(0)
    dense = DepthWeights(SUBLAYERS).double()
    with torch.no_grad():
        for alpha in dense.alphas:
            alpha.copy_(torch.randn_like(alpha))
    x0 = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    weights = [(torch.randn(4, 4, dtype=torch.float64) / 2).requires_grad_() for _ in range(SUBLAYERS)]
    return dense, x0, weights


@pytest.mark.parametrize("buffered", [True, False])
def test_a_stream_is_the_loop_in_value_and_every_gradient(buffered):
    dense, x0, weights = _setup()
    params = [x0, *weights, *dense.alphas]
    got = _chain(x0, weights, dense, buffered)
    want = _chain(x0, weights, dense, None)
    torch.testing.assert_close(got, want)
    upstream = torch.randn_like(got)
    for g, o in zip(torch.autograd.grad(got, params, upstream), torch.autograd.grad(want, params, upstream),
                    strict=True):
        torch.testing.assert_close(g, o)


def test_the_buffered_stream_passes_gradcheck():
    """The alphas as plain tensors (what the stream reads of DepthWeights), so that gradcheck perturbs them."""
    _, x0, weights = _setup()
    alphas = [torch.randn(n + 2, dtype=torch.float64, requires_grad=True) for n in range(SUBLAYERS)]

    def run(x, *tensors):  # noqa: ANN001, ANN202
        stream, h = BufferedStream(SimpleNamespace(alphas=tensors[:SUBLAYERS]), x), x
        for w in tensors[SUBLAYERS:]:
            h = stream.add(h + torch.tanh(h @ w))
        return h

    assert torch.autograd.gradcheck(run, (x0, *alphas, *weights))


def test_a_retained_graph_run_twice_gives_the_same_gradients():
    dense, x0, weights = _setup()
    out = _chain(x0, weights, dense, True).square().sum()
    first = torch.autograd.grad(out, [x0, *weights, *dense.alphas], retain_graph=True)
    second = torch.autograd.grad(out, [x0, *weights, *dense.alphas])
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b)


def _list_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DepthWeights, "stream", lambda self, x0, buffered: ListStream(self, x0))


@pytest.mark.parametrize("family", ["gpt-bert", "tta", "gpt"])
def test_a_training_step_through_the_buffer_is_the_list_streams(family, monkeypatch):
    torch.manual_seed(0)
    model = build_model(preset("tiny", family=family, denseformer=True, norm_placement="pre", **NO_DROPOUT)).train()
    with torch.no_grad():
        for alpha in model.encoder.dense.alphas:
            alpha.add_(0.1 * torch.randn_like(alpha))
    ids, mask = padded_batch([9, 6, 7])
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))

    def grads() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss, got = grads()
    _list_streams(monkeypatch)
    want_loss, want = grads()
    torch.testing.assert_close(loss, want_loss, rtol=1e-6, atol=1e-6)
    assert got.keys() == want.keys() and any("dense.alphas" in n for n in got)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_loss_on_a_middle_layer_still_gets_the_list_streams_gradients(monkeypatch):
    """Only the weighted sums up to that layer run a backward: the buffer's gradients start where they do."""
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="bert", denseformer=True, **NO_DROPOUT)).train()
    with torch.no_grad():
        for alpha in model.encoder.dense.alphas:
            alpha.add_(0.1 * torch.randn_like(alpha))
    ids, mask = padded_batch([8, 5])

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        model(ids, attention_mask=mask, output_hidden_states=True).hidden_states[1].square().mean().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    got = grads()
    _list_streams(monkeypatch)
    want = grads()
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)


def test_the_buffered_stream_refuses_to_regather_rows():
    dense = DepthWeights(2)
    with pytest.raises(ValueError, match="list one"):
        dense.stream(torch.zeros(2, 3, 4), buffered=True).rows((torch.arange(2), torch.zeros(2, dtype=torch.long)))


def test_a_compiled_pass_without_gradients_traces_every_sum_in_one_graph():
    """Under no_grad the list stream's sums skip the autograd Function (torch.compile cannot trace its forward there:
    a graph break at every sum before commit 1f00af4, torch 2.13) and give its values."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    weights = DepthWeights(4)
    with torch.no_grad():
        for alpha in weights.alphas:
            alpha.normal_()
    states = [torch.randn(2, 3, 8) for _ in range(5)]

    def sums(states: list[torch.Tensor]) -> list[torch.Tensor]:
        return [weights(states[: n + 2], n) for n in range(4)]

    want = sums(states)  # with gradients on: through the Function
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        got = torch.compile(sums, backend="aot_eager")(states)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
