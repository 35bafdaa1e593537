"""run.compile: the trainer's forward and backward under torch.compile give the eager run's weights (to rounding),
with the head's plain cross-entropy standing in for its CPU-fused one inside the compiled graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from maskplay.data.dataset import write_split
from maskplay.data.tokenizer import SPECIAL_TOKENS, load_tokenizer
from maskplay.tasks.train import train
from tests.tasks.train.test_train import NO_DROPOUT, VOCAB, small_config, weights

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # compiling takes half a minute or more on a 2-core machine


def fixed_length_data(directory):
    """Sequences of one length, so that the run compiles once (a new shape compiles again)."""
    directory.mkdir(parents=True)
    (directory / "vocab.txt").write_text("\n".join(SPECIAL_TOKENS + [f"w{i}" for i in range(7, VOCAB)]) + "\n")
    load_tokenizer(directory / "vocab.txt").save(directory)
    rng = np.random.default_rng(0)
    seqs = [[3, *rng.integers(7, VOCAB, 14).tolist(), 1] for _ in range(64)]
    write_split(directory / "train", seqs[:48], VOCAB)
    write_split(directory / "valid", seqs[48:], VOCAB)
    return directory


def eager_then_compiled(tmp_path, family: str, common: list[str], *compile_sets: str) -> tuple[dict, dict]:
    """The weights of a run with `common` and of the same run under run.compile (and `compile_sets`), dynamo reset and
    its counters cleared between them, so that a test reads what the compiled run alone counted."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    data = fixed_length_data(tmp_path / "data")
    eager = train(small_config(data, tmp_path / "eager", *common, family=family))
    torch._dynamo.reset()
    counters.clear()
    compiled = train(small_config(data, tmp_path / "compiled", *common, "run.compile=true", *compile_sets,
                                  family=family))
    a, b = weights(eager.run_dir), weights(compiled.run_dir)
    assert a.keys() == b.keys()
    return a, b


def assert_same_weights(a: dict, b: dict, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("family", ["gpt", "bert", "gpt-bert"])
def test_compiled_training_gives_the_eager_weights(tmp_path, family):
    """One graph for each: GPT's rows have no padding, which the trainer tells the forward (masks.rows_without_padding)
    instead of letting the flash path's check read the mask inside the graph; BERT's labelled positions, as many as
    its masking chose, are traced with a size known at run time (stepping.compile_forward), not a break;
    GPT-BERT's rows' modes, which pick SDPA's mask, come from the host's copy too (its known_from_host)."""
    from torch._dynamo.utils import counters

    common = [*NO_DROPOUT, "optim.max_steps=3", "optim.warmup_steps=1", "run.precision=fp32", "data.bucket_window=1"]
    a, b = eager_then_compiled(tmp_path, family, common)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    assert_same_weights(a, b)


RECIPE_ARCH = ["model.denseformer=true", "model.positions=disentangled", "model.norm_placement=pre", "model.num_layers=3"]
RECIPE_COMMON = [*NO_DROPOUT, "optim.max_steps=3", "optim.warmup_steps=1", "run.precision=fp32", "data.bucket_window=1",
                 *RECIPE_ARCH]


@pytest.mark.parametrize("family", ["tta", "gpt-bert"])
def test_a_recipe_compiles_whole_without_a_graph_break(tmp_path, family):
    """T-TA and GPT-BERT at the strict-small recipes' architecture (DenseFormer, disentangled positions, pre-LN)
    under the step scope: one graph, no break, no recompile (no read-back of dead rows, mask kind, target count or,
    GPT-BERT's, its modes' counts inside the forward: 4 breaks and a recompile a step before commit 308e144), and the
    eager run's weights."""
    from torch._dynamo.utils import counters, guard_failures

    a, b = eager_then_compiled(tmp_path, family, RECIPE_COMMON)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1 and not guard_failures
    assert_same_weights(a, b)


def test_layers_scope_gives_the_eager_weights(tmp_path):
    """run.compile_scope = "layers" on T-TA with GPT-BERT's DenseFormer and disentangled positions (the strict-small
    recipes' architecture): each block compiled once for every layer (two frames, attention and feed-forward
    sub-layers, at any depth: tests/nn/test_regional.py), and the eager run's weights."""
    from torch._dynamo.utils import counters, guard_failures

    a, b = eager_then_compiled(tmp_path, "tta", RECIPE_COMMON, "run.compile_scope=layers")
    assert counters["frames"]["total"] == 2 and not guard_failures  # one code for all 3 layers, compiled once
    assert_same_weights(a, b)


def test_nested_scope_gives_the_eager_gradients_and_weights(tmp_path):
    """run.compile_scope = "nested" through inductor on GPT-BERT's recipe architecture: the step one graph, each block
    a region lowered once for every layer (the subgraphs counted: tests/nn/test_regional.py); one step's loss and
    every gradient are eager's (to fp32's rounding, as the step scope's), and the weights after 3 trained steps too,
    to LAMB's amplification of that rounding in DenseFormer's 2-element weights (its trust ratio)."""
    import torch._dynamo
    from torch._dynamo.utils import counters, guard_failures

    from maskplay import preset
    from maskplay.families import build_model
    from maskplay.tasks.train.stepping import compile_forward
    from tests.families.test_gpt_bert_switches import GPT_BERT
    from tests.nn.test_regional import tiny_batch

    torch.manual_seed(0)
    model = build_model(preset("tiny", family="gpt-bert", num_layers=3, hidden_dropout=0.0, attention_dropout=0.0,
                               **GPT_BERT)).train()
    batch = tiny_batch(model, 0, padded=False)

    def loss_and_grads(forward):  # noqa: ANN001, ANN202
        model.zero_grad(set_to_none=True)
        with model.known_from_host(batch):
            loss = forward(**batch).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want, want_grads = loss_and_grads(model)
    torch._dynamo.reset()
    counters.clear()
    got, got_grads = loss_and_grads(compile_forward(model.__call__, model, "nested"))
    assert counters["stats"]["unique_graphs"] == 1
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-4, atol=1e-6, msg=name)

    a, b = eager_then_compiled(tmp_path, "gpt-bert", RECIPE_COMMON, "run.compile_scope=nested")
    assert counters["stats"]["unique_graphs"] == 1 and not guard_failures
    assert_same_weights(a, b, rtol=1e-3, atol=5e-5)


def test_a_compiled_run_with_dropout_resumes_bitwise(tmp_path):
    """GPT-BERT at the recipes' architecture, compiled whole, with hidden dropout (the recipes' 0.1: random numbers
    drawn inside the compiled graph) and the weights' moving average: 6 steps in one run, and 3 then a resume from
    the checkpoint (as gpu_one_call.sh's PART=1 and PART=2 continue one run), give the same weights, bitwise."""
    data = fixed_length_data(tmp_path / "data")
    common = ["model.hidden_dropout=0.1", "model.attention_dropout=0", "optim.max_steps=6", "optim.warmup_steps=1",
              "optim.ema=0.9", "run.precision=fp32", "data.bucket_window=1", "run.save_every=3", "run.compile=true",
              *RECIPE_ARCH]
    whole = train(small_config(data, tmp_path / "whole", *common, family="gpt-bert"))
    part = train(small_config(data, tmp_path / "part", *common, "run.stop_at_step=3", family="gpt-bert"))
    assert whole.exit_code == 0 and part.exit_code == 0
    resumed = train(small_config(data, tmp_path / "part", *common, family="gpt-bert"), resume=True)
    assert resumed.exit_code == 0
    for which in ("final", "final-raw"):
        a, b = weights(whole.run_dir, which), weights(resumed.run_dir, which)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), which
