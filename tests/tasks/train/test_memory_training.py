"""Transformer-XL's segment recurrence in training (run.memory_length, data.stream): a step with memory against a
naive loop over both segments at once, with each layer's input over the first segment detached (Transformer-XL's
stop-gradient written out); no gradient reaching the memory; the contiguous stream; resuming inside a document."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from maskplay import preset
from maskplay.families import MaskplayModel, build_model

ORACLE_TOL = dict(atol=1e-6, rtol=1e-5)


def gpt(positions: str = "alibi", seed: int = 0, **fields) -> MaskplayModel:
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family="gpt", positions=positions, hidden_dropout=0.0, attention_dropout=0.0,
                               **fields))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.2)
    return model.train()


def segments(lengths=(7, 5), batch: int = 2, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(7, 100, (batch, n), generator=g) for n in lengths]


def grads(model: MaskplayModel) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def naive_second_segment(model: MaskplayModel, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The loss on `second` from one causal pass over first + second, each layer's input at the first segment's
    positions detached (pre-hooks): what the second segment reads of the first gets no gradient. Its targets are
    the second segment's pieces from the second on, as the segment's own step has them (its first piece is no
    target, as in every GPT segment)."""
    n = first.shape[1]

    def detach_first(module, args):
        h, *rest = args
        return (torch.cat([h[:, :n].detach(), h[:, n:]], dim=1), *rest)

    hooks = [layer.register_forward_pre_hook(detach_first) for layer in model.encoder.layers]
    try:
        ids = torch.cat([first, second], dim=1)
        labels = torch.full_like(ids, -100)
        labels[:, n + 1:] = second[:, 1:]
        return model(ids, labels=labels).loss
    finally:
        for hook in hooks:
            hook.remove()


@pytest.mark.parametrize("positions, fields", [("alibi", {}), ("t5", {}), ("rotary", {}),
                                               ("alibi", dict(norm_placement="pre")), ("none", {}),
                                               ("transformer-xl", {}), ("transformer-xl", dict(norm_placement="pre"))])
def test_a_step_with_memory_equals_a_naive_two_segment_loop(positions, fields):
    model = gpt(positions, **fields)
    first, second = segments()
    out = model(first, labels=first, memory_length=16)
    assert [tuple(m.shape) for m in out.mems] == [(2, 7, 32)] * 2
    model.zero_grad()
    loss = model(second, labels=second, mems=out.mems, memory_length=16).loss
    loss.backward()
    with_memory = grads(model)
    model.zero_grad()
    naive = naive_second_segment(model, first, second)
    naive.backward()
    expected = grads(model)
    assert loss.item() == pytest.approx(naive.item(), abs=1e-6)
    assert with_memory.keys() == expected.keys()
    for name, grad in expected.items():
        torch.testing.assert_close(with_memory[name], grad, **ORACLE_TOL, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("positions", ["alibi", "transformer-xl"])
def test_no_gradient_reaches_the_memory(positions):
    model = gpt(positions)
    first, second = segments()
    mems = [m.clone().requires_grad_(True) for m in model(first, labels=first, memory_length=16).mems]
    out = model(second, labels=second, mems=mems, memory_length=16)
    out.loss.backward()
    assert all(m.grad is None for m in mems)
    assert all(not m.requires_grad for m in out.mems)


def test_memory_is_cut_to_its_length_and_changes_the_output():
    model = gpt().eval()
    a, b, c = segments((6, 6, 5))
    with torch.no_grad():
        m1 = model(a, memory_length=8).mems
        m2 = model(b, mems=m1, memory_length=8).mems
        with_memory = model(c, mems=m2, memory_length=8).logits
        without = model(c).logits
        # the last 8 inputs of each layer over a + b: the two last of a, all of b
        full = model(torch.cat([a, b], dim=1), output_hidden_states=True).hidden_states
    assert [tuple(m.shape) for m in m2] == [(2, 8, 32)] * 2
    torch.testing.assert_close(m2[0], full[0][:, 4:], **ORACLE_TOL)
    assert not torch.allclose(with_memory, without)


@pytest.mark.parametrize("fields, message", [
    (dict(positions="learned"), "needs relative positions"),
    (dict(positions="alibi", attention="synthesizer-dense"), "not with attention"),
    (dict(positions="alibi", reversible=True, norm_placement="pre"), "not with reversible"),
])
def test_what_memory_refuses(fields, message):
    model = gpt(**fields)
    ids = segments()[0]
    with pytest.raises(ValueError, match=message):
        model(ids, labels=ids, memory_length=4)


# ---- the contiguous stream and the loop -------------------------------------------------------------------------

STREAM = ["model.positions=alibi", "data.stream=true", "data.batch_size=4", "data.max_length=16", "run.eval_every=4",
          "run.eval_batches=2"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from tests.tasks.train.test_train import make_data

    return make_data(tmp_path_factory.mktemp("data"))


def test_each_row_reads_its_lane_in_order_across_steps(data):
    from maskplay.data.dataset import TokenDataset
    from maskplay.tasks.train.stream import StreamSteps

    tokens = np.asarray(TokenDataset(data / "train").tokens, dtype=np.int64)
    steps = StreamSteps(data / "train", lanes=4, segment=16, rank=0, world_size=1, grad_accum=2)
    per_lane = len(tokens) // 4 // 16 * 16
    assert len(steps) == per_lane // 16
    rows = [torch.cat([micro[0] for micro in steps[k]]) for k in range(len(steps))]  # (4, 16) per step
    for lane in range(4):
        text = torch.cat([r[lane] for r in rows]).numpy()
        assert np.array_equal(text, tokens[lane * per_lane:(lane + 1) * per_lane])
    assert all(bool(micro[1].all()) for micro in steps[0])


def test_training_with_memory_carries_it_and_resumes_inside_a_document_exactly(data, tmp_path):
    from maskplay.tasks.train import train
    from tests.tasks.train.test_train import assert_same_weights, small_config, train_losses, weights

    memory = [*STREAM, "run.memory_length=24"]
    whole = train(small_config(data, tmp_path / "whole", *memory, family="gpt"))
    assert whole.step == 8
    part = train(small_config(data, tmp_path / "part", *memory, "run.stop_at_step=3", family="gpt"))
    assert part.step == 3
    saved = load_file(str(tmp_path / "part" / "ckpt-000003" / "memory.safetensors"))
    assert sorted(saved) == ["0/0", "0/1"] and saved["0/0"].shape == (4, 24, 32)  # step 3: a full memory
    rest = train(small_config(data, tmp_path / "part", *memory, family="gpt"), resume=True)
    assert_same_weights(weights(whole.run_dir), weights(rest.run_dir))
    assert train_losses(whole.run_dir) == {**train_losses(tmp_path / "part")}
    # the same run without memory reads the same segments and learns something else
    plain = train(small_config(data, tmp_path / "plain", *STREAM, family="gpt"))
    assert train_losses(plain.run_dir)[1] == train_losses(whole.run_dir)[1]  # step 1: no memory yet
    assert train_losses(plain.run_dir)[2] != train_losses(whole.run_dir)[2]


@pytest.mark.parametrize("overrides, message", [
    (["run.memory_length=8"], "set data.stream = true"),
    (["data.stream=true", "data.pack=true"], "not with data.pack"),
    (["run.memory_length=-1"], "must be >= 0"),
])
def test_stream_and_memory_config_errors(data, tmp_path, overrides, message):
    from tests.tasks.train.test_train import small_config

    with pytest.raises(ValueError, match=message):
        small_config(data, tmp_path / "r", *overrides, family="gpt")


def test_memory_is_refused_where_a_family_has_none(data, tmp_path):
    from maskplay.tasks.train import train
    from tests.tasks.train.test_train import small_config

    with pytest.raises(ValueError, match="family bert has no Transformer-XL memory in training.*gpt"):
        train(small_config(data, tmp_path / "b", *STREAM, "run.memory_length=8", family="bert"))
    with pytest.raises(ValueError, match="needs relative positions"):
        train(small_config(data, tmp_path / "g", *STREAM[1:], "run.memory_length=8", family="gpt"))


# ---- XLNet: the permutation LM with memory, as the paper pretrains ---------------------------------------------


def test_an_xlnet_step_with_memory_equals_one_pass_with_the_first_segment_first_in_the_order():
    """The naive pass: both segments at once, the first segment's positions first in the factorization order (in
    its own order), so every query of the second sees all of the first, as memory shows it; every layer's input
    at the first segment's positions detached (a hook on the embeddings and on every layer's output but the
    last)."""
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="xlnet", hidden_dropout=0.0, attention_dropout=0.0)).train()
    first, second = segments((7, 6))
    ones = [torch.ones_like(x, dtype=torch.bool) for x in (first, second)]
    g = torch.Generator().manual_seed(0)
    b1, b2 = (model.training_batch(x, m, generator=g) for x, m in zip((first, second), ones, strict=True))
    mems = model(**b1, memory_length=16).mems
    assert [tuple(m.shape) for m in mems] == [(2, 7, 32)] * 2
    model.zero_grad()
    loss = model(**b2, mems=mems, memory_length=16).loss
    loss.backward()
    with_memory = grads(model)

    n = first.shape[1]

    def detach_first(module, args, output):
        return torch.cat([output[:, :n].detach(), output[:, n:]], dim=1)

    # the last layer's output is no layer's input (and holds only the query rows: its content rows feed nothing)
    hooks = [m.register_forward_hook(detach_first) for m in (model.embeddings, *list(model.encoder.layers)[:-1])]
    try:
        model.zero_grad()
        naive = model(torch.cat([first, second], dim=1), order=torch.cat([b1["order"], b2["order"] + n], dim=1),
                      target_positions=b2["target_positions"] + n, labels=b2["labels"]).loss
        naive.backward()
    finally:
        for hook in hooks:
            hook.remove()
    expected = grads(model)
    assert loss.item() == pytest.approx(naive.item(), abs=1e-6)
    for name, grad in expected.items():
        torch.testing.assert_close(with_memory[name], grad, **ORACLE_TOL, msg=lambda m, k=name: f"{k}: {m}")


def test_a_transformer_xl_gpt_trains_with_memory_through_the_loop(data, tmp_path):
    """Transformer-XL itself: GPT under its relative positions, trained on the stream with memory."""
    from maskplay.tasks.train import train
    from tests.tasks.train.test_train import small_config, train_losses

    run = train(small_config(data, tmp_path / "t", "model.positions=transformer-xl", *STREAM[1:],
                             "run.memory_length=16", "optim.max_steps=3", family="gpt"))
    assert run.step == 3 and all(np.isfinite(v) for v in train_losses(run.run_dir).values())
    assert load_file(str(tmp_path / "t" / "ckpt-000003" / "memory.safetensors"))["0/0"].shape == (4, 16, 32)


def test_xlnet_trains_with_memory_through_the_loop(data, tmp_path):
    from maskplay.tasks.train import train
    from tests.tasks.train.test_train import small_config, train_losses

    run = train(small_config(data, tmp_path / "x", *STREAM[1:], "run.memory_length=16", "optim.max_steps=4",
                             family="xlnet"))
    assert run.step == 4 and all(np.isfinite(v) for v in train_losses(run.run_dir).values())
    saved = load_file(str(tmp_path / "x" / "ckpt-000004" / "memory.safetensors"))
    assert saved["0/0"].shape == (4, 16, 32)
