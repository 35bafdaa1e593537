"""Regional compilation (nn/regional.py, run.compile_scope = "layers"): every block runs through one compiled code,
reused by all layers, and gives the eager model's loss and gradients; and "nested": the step compiled whole, each
block a nested compile region whose subgraph every layer reuses. Counted with dynamo alone (backend "eager"):
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
from maskplay.nn.regional import NESTED, compiled_blocks
from maskplay.tasks.train.config import TrainConfig
from tests.families.test_gpt_bert_switches import GPT_BERT


def loss_and_grads(model, batch, regional: bool):  # noqa: ANN001, ANN201
    model.zero_grad(set_to_none=True)
    with compiled_blocks(model, backend="eager") if regional else contextlib.nullcontext():
        loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def tiny_batch(model, seed: int, padded: bool = True):  # noqa: ANN001, ANN201
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(7, 100, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.bool)
    mask[1, 9:] = not padded
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
                                             (["run.compile_scope=layers", "run.memory_length=4"], "memory"),
                                             (["run.compile_scope=nested", "run.memory_length=4"], "memory")])
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


def region_subgraphs(forward, batch) -> tuple[int, int]:  # noqa: ANN001
    """(graphs, distinct nested-region subgraphs called in them) of `forward` compiled by a backend that keeps dynamo's
    graphs and runs them as they are."""
    graphs = []

    def keep(gm, example_inputs):  # noqa: ANN001, ANN202
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    # the loss's labelled positions with a run-time count and what the host knows of the batch, as the trainer
    # compiles it
    model = forward.__self__
    with torch.no_grad(), compiled_blocks(model, backend=NESTED), model.known_from_host(batch), \
            torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        torch.compile(forward, backend=keep)(**batch)
    called = {n.args[0].target for gm in graphs for n in gm.graph.nodes
              if n.op == "call_function" and n.target is torch.ops.higher_order.invoke_subgraph}
    return len(graphs), len(called)


@pytest.mark.heavy
@pytest.mark.slow  # traces six forwards and a backward a model: about 30 s in all on a 2-core machine
@pytest.mark.parametrize("family,arch", [("tta", GPT_BERT), ("gpt-bert", GPT_BERT), ("bert", {})],
                         ids=["tta-recipe", "gpt-bert-recipe", "bert"])
def test_the_nested_scope_is_one_graph_whose_layers_reuse_one_region(family, arch):
    """run.compile_scope = "nested" (train/stepping.compile_forward): one graph whatever the depth, in which every
    layer calls the same region subgraphs (the block, or DenseFormer's two sub-layers: T-TA's per-layer keys/values
    and GPT-BERT's disentangled positions go in flattened, their structure a constant), a second batch recompiles
    nothing, and the loss and every gradient are the eager model's (through AOTAutograd). Full rows, as packing makes
    them: plain BERT's SDPA reads a padded batch's mask back (a graph break in either whole-step scope)."""
    from maskplay.tasks.train.stepping import compile_forward

    for layers in (2, 4):
        torch.manual_seed(0)
        model = build_model(preset("tiny", family=family, num_layers=layers, hidden_dropout=0.0,
                                   attention_dropout=0.0, **arch)).train()
        batch = tiny_batch(model, 0, padded=False)
        assert region_subgraphs(model.__call__, batch) == (1, 2 if arch.get("denseformer") else 1), layers
    torch._dynamo.reset()
    guard_failures.clear()
    compiled = compile_forward(model.__call__, model, "nested", backend="aot_eager")
    for seed in (0, 1):
        batch = tiny_batch(model, seed, padded=False)
        eager_loss, eager_grads = loss_and_grads(model, batch, regional=False)
        model.zero_grad(set_to_none=True)
        with model.known_from_host(batch):
            loss = compiled(**batch).loss
        loss.backward()
        torch.testing.assert_close(loss.detach(), eager_loss, rtol=1e-6, atol=1e-6)
        for name, p in model.named_parameters():
            if name in eager_grads:
                torch.testing.assert_close(p.grad, eager_grads[name], rtol=1e-5, atol=1e-6, msg=name)
    assert not guard_failures, f"recompiled: {dict(guard_failures)}"


def test_the_nested_scope_needs_nested_regions_and_an_encoders_blocks(monkeypatch):
    import maskplay.nn.regional as regional
    from maskplay.tasks.train.stepping import compile_forward

    xlnet = build_model(preset("tiny", family="xlnet"))
    with pytest.raises(ValueError, match="'nested'"):
        compile_forward(xlnet.__call__, xlnet, "nested")
    bert = build_model(preset("tiny", family="bert"))
    monkeypatch.setattr(regional, "_NESTED_PARTS", None)
    with pytest.raises(ValueError, match="needs torch.compiler.nested_compile_region"):
        compile_forward(bert.__call__, bert, "nested")


def test_the_nested_scope_refuses_what_it_cannot_flatten():
    from maskplay.nn.regional import _flatten

    with pytest.raises(ValueError, match="compile_scope = 'nested' passes a block's inputs as tensors and constants"):
        _flatten(object(), [])
