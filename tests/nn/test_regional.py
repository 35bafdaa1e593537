"""Regional compilation (nn/regional.py, run.compile_scope = "layers"): every block runs through one compiled code,
reused by all layers, and gives the eager model's loss and gradients. Counted with dynamo alone (backend "eager"):
frames and recompiles are dynamo's facts whatever backend then compiles the graphs (tests/tasks/train/
test_train_compile.py trains through inductor)."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters, guard_failures

from maskplay import preset
from maskplay.config import apply_overrides
from maskplay.families import build_model
from maskplay.nn.regional import compiled_blocks
from maskplay.tasks.train.config import TrainConfig
from tests.families.test_gpt_bert_switches import GPT_BERT


def loss_and_grads(model, batch, regional: bool):  # noqa: ANN001, ANN201
    model.zero_grad(set_to_none=True)
    with compiled_blocks(model, backend="eager") if regional else contextlib.nullcontext():
        loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def tiny_batch(model, seed: int):  # noqa: ANN001, ANN201
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(7, 100, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.bool)
    mask[1, 9:] = False  # padding
    return model.training_batch(ids, mask, generator=g)


@pytest.mark.parametrize("family,arch", [("tta", GPT_BERT), ("gpt-bert", GPT_BERT), ("bert", {}), ("gpt", {})],
                         ids=["tta-recipe", "gpt-bert-recipe", "bert", "gpt"])
def test_every_layer_runs_one_compiled_code(family, arch):
    """The frames dynamo compiles do not grow with the depth (T-TA's per-layer keys/values included: no layer index
    is specialised on), a second step with other data compiles nothing, and loss and gradients are the eager ones."""
    frames = {}
    for layers in (2, 5):
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        model = build_model(preset("tiny", family=family, num_layers=layers, hidden_dropout=0.0,
                                   attention_dropout=0.0, **arch)).train()
        for seed in (0, 1):
            batch = tiny_batch(model, seed)
            eager_loss, eager_grads = loss_and_grads(model, batch, regional=False)
            loss, grads = loss_and_grads(model, batch, regional=True)
            torch.testing.assert_close(loss, eager_loss, rtol=1e-6, atol=1e-6)
            assert grads.keys() == eager_grads.keys()
            for name in grads:
                torch.testing.assert_close(grads[name], eager_grads[name], rtol=1e-5, atol=1e-6,
                                           msg=lambda m, n=name: f"{n}: {m}")
        assert not guard_failures, f"recompiled: {dict(guard_failures)}"
        assert not counters["graph_break"], dict(counters["graph_break"])
        frames[layers] = counters["frames"]["total"]
    # one frame per block method called: the block, or DenseFormer's two sub-layers
    assert frames[2] == frames[5] == (2 if arch.get("denseformer") else 1)


def test_the_switch_is_off_outside_the_block():
    model = build_model(preset("tiny", family="bert"))
    with compiled_blocks(model, backend="eager"):
        assert model.encoder.regional == "eager"
    assert model.encoder.regional is None


@pytest.mark.parametrize("family,overrides", [("xlnet", {}), ("gpt", {"reversible": True, "norm_placement": "pre"})])
def test_models_whose_blocks_it_cannot_serve_are_refused(family, overrides):
    model = build_model(preset("tiny", family=family, **overrides))
    with pytest.raises(ValueError, match="compile_scope = 'layers'"), compiled_blocks(model):
        pass


@pytest.mark.parametrize("overrides,match", [(["run.compile_scope=block"], "run.compile_scope must be one of"),
                                             (["run.compile_scope=layers", "run.memory_length=4"], "memory")])
def test_a_bad_compile_scope_is_named(overrides, match):
    with pytest.raises(ValueError, match=match):
        apply_overrides(TrainConfig(), overrides)


def test_bf16_weights_cast_per_forward_share_one_code_too():
    """run.precision = "bf16" hands the blocks bf16 copies of the weights (functional_call, precision.forward_in):
    still one compiled code for every layer, and the eager loss."""
    from maskplay.runtime.precision import forward_in

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="tta", num_layers=3, hidden_dropout=0.0, attention_dropout=0.0,
                               **GPT_BERT)).train()
    batch = tiny_batch(model, 0)
    eager = forward_in(model, "bf16", **batch).loss
    for _ in range(2):
        with compiled_blocks(model, backend="eager"):
            loss = forward_in(model, "bf16", **batch).loss
        loss.backward()
        torch.testing.assert_close(loss, eager, rtol=1e-5, atol=1e-5)
    assert counters["frames"]["total"] == 2 and not guard_failures
