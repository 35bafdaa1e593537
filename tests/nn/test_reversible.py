"""model.reversible: RevNet's reversible residual as a backbone switch (Reformer's layers). The gradients of the
memory-saving path (ReversibleSequence: no block's activations kept, each block rebuilt from its outputs in the
backward pass) against a naive loop of the same math that keeps them (autograd through stored activations), for
every single-stream family and the switches whose tensors the blocks read besides their input; the activations
kept not growing with depth; the refusals; a run through the real training loop."""

from __future__ import annotations

import math

import pytest
import torch

from maskplay import preset
from maskplay.config import LongAttentionConfig, ModelConfig, apply_overrides
from maskplay.families import MaskplayModel, build_model
from maskplay.nn.backbone import Encoder
from maskplay.nn.pass_modes import LastLayerRows
from maskplay.tasks.grow import grow
from maskplay.tasks.train import TrainConfig, train
from maskplay.tasks.train.config import ModelSection
from tests.conftest import padded_batch

REVERSIBLE = dict(norm_placement="pre", reversible=True)

# family, the switches: each case reads something else besides the blocks' input (a T5 bias folded into the mask,
# T-TA's keys/values projected outside the blocks, disentangled positions' table, the banded kernel's T5 table)
CASES = {
    "gpt": ("gpt", {}),
    "gpt+rotary+dropout": ("gpt", dict(positions="rotary", hidden_dropout=0.1, attention_dropout=0.1)),
    "bert+t5": ("bert", dict(positions="t5")),
    "tta": ("tta", {}),
    "tta+shared+t5": ("tta", dict(share_layers=True, positions="t5")),
    "unilm+alibi+shared": ("unilm", dict(positions="alibi", share_layers=True)),
    "electra": ("electra", {}),
    "gpt-bert+disentangled": ("gpt-bert", dict(positions="disentangled")),
    "gpt+banded+t5": ("gpt", dict(positions="t5", long=LongAttentionConfig(window=3, banded_from=1))),
    "bert+lsra": ("bert", dict(attention="lsra")),
    "gpt+transformer-xl+dropout": ("gpt", dict(positions="transformer-xl", hidden_dropout=0.1)),
}


def naive_run(self: Encoder, h, inputs, states, rows):
    """The reversible math written out, every activation kept: x1 = x1 + F(x2); x2 = x2 + G(x1); out = mean."""
    x1 = x2 = h
    for index, layer in enumerate(self.layers):
        x1 = x1 + layer.attention_branch(x2, inputs, index)
        x2 = x2 + layer.ffn_branch(x1)
    return self._finish((x1 + x2) / 2, states, inputs.packing)


def model_of(family: str, seed: int = 0, layers: int = 3, **fields) -> MaskplayModel:
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family=family, num_layers=layers, **{"hidden_dropout": 0.0,
                                                                             "attention_dropout": 0.0, **REVERSIBLE,
                                                                             **fields}))
    if family == "unilm":
        model.config.unilm.objective = "mixed"
    return model.train()


def loss_and_grads(model: MaskplayModel) -> tuple[float, dict[str, torch.Tensor]]:
    ids, mask = padded_batch([9, 6, 8])
    torch.manual_seed(1)  # the same dropout and ELECTRA samples in both runs
    model.zero_grad()
    out = model(**model.training_batch(ids, mask, torch.Generator().manual_seed(0)))
    out.loss.backward()
    return out.loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("case", CASES)
def test_gradients_equal_a_naive_loop_that_keeps_the_activations(case, monkeypatch):
    family, fields = CASES[case]
    model = model_of(family, **fields)
    loss, grads = loss_and_grads(model)
    with monkeypatch.context() as patch:
        patch.setattr(Encoder, "_run_reversible", naive_run)
        naive_loss, naive_grads = loss_and_grads(model)
    assert loss == pytest.approx(naive_loss, abs=1e-6)
    assert grads.keys() == naive_grads.keys() == {n for n, _ in model.named_parameters()}
    for name, grad in naive_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def saved_bytes(model: MaskplayModel) -> int:
    ids, mask = padded_batch([32, 32])
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        if not isinstance(t, torch.nn.Parameter):
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):  # the forward's (not the recomputations')
        out = model(ids, attention_mask=mask).last_hidden_state.sum()
    out.backward()
    return total


def test_the_activations_kept_do_not_grow_with_depth():
    kept = {layers: saved_bytes(model_of("gpt", layers=layers)) for layers in (2, 8)}
    plain = {layers: saved_bytes(model_of("gpt", layers=layers, reversible=False)) for layers in (2, 8)}
    assert kept[8] == kept[2]
    assert plain[8] > 3 * plain[2]


def test_inference_hidden_states_and_rows_run_the_same_math():
    model = model_of("bert", layers=2).eval()
    ids, mask = padded_batch([7, 5])
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True)
        rows = model(ids, attention_mask=mask, last_layer_rows=LastLayerRows(torch.tensor([3, 1]))).last_hidden_state[:, 0]
    trained = model(ids, attention_mask=mask).last_hidden_state  # with gradients: the ReversibleSequence path
    torch.testing.assert_close(out.last_hidden_state[mask], trained[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows, out.last_hidden_state[[0, 1], [3, 1]], atol=1e-5, rtol=1e-5)
    assert len(out.hidden_states) == 3


@pytest.mark.parametrize("fields, message", [
    (dict(family="bert", reversible=True), "not with norm_placement = 'post'"),
    (dict(family="gpt", reversible=True, norm_placement="deepnorm"), "not with norm_placement = 'deepnorm'"),
    (dict(family="xlnet", reversible=True), "not with family xlnet"),
    (dict(family="bert", reversible=True, norm_placement="pre", denseformer=True), "not with denseformer"),
])
def test_what_reversible_refuses(fields, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**fields)
    section = {k: v for k, v in fields.items()}
    with pytest.raises(ValueError, match=message):
        ModelSection(**section)


def test_config_json_leaves_it_out_when_off_and_converters_refuse_it():
    assert "reversible" not in ModelConfig().to_dict()
    config = ModelConfig(family="gpt", **REVERSIBLE)
    assert config.to_dict()["reversible"] is True
    assert "reversible = True" in config.architecture_changes()  # what convert.to_hf refuses, by name


def test_a_reversible_model_trains_through_the_loop(tmp_path):
    from tests.tasks.train.test_train import SMALL, make_data, train_losses

    data = make_data(tmp_path / "data")
    config = apply_overrides(TrainConfig(model=ModelSection(family="gpt")),
                             [*SMALL, f"data.path={data}", f"run.out_dir={tmp_path / 'run'}", "model.norm_placement=pre",
                              "model.reversible=true", "optim.max_steps=12"]).validate()
    train(config)
    losses = train_losses(tmp_path / "run")
    assert all(math.isfinite(v) for v in losses.values())
    assert losses[max(losses)] < losses[min(losses)]
    saved = MaskplayModel.from_pretrained(tmp_path / "run" / "final")
    assert saved.config.reversible and saved.encoder.reversible


def test_growth_stays_exact():
    """A new block whose output projections are zero leaves both halves as they were; widening copies units."""
    small = model_of("gpt").eval()
    grown = grow(small, layers=4, hidden=64)
    assert grown.exact and grown.model.config.reversible
    ids, mask = padded_batch([9, 5])
    with torch.no_grad():
        a = small(ids, attention_mask=mask).logits
        b = grown.model.eval()(ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask], b[mask], atol=1e-5, rtol=1e-5)
