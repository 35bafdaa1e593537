"""GPT-BERT's training pieces as options of the shared loop (docs/guides/training.md, "GPT-BERT's recipe pieces"):
LAMB against torch-optimizer's Lamb and a naive float64 loop of the formula, the cosine-with-cooldown schedule at
chosen steps, the batch-size ramp and sequence-length schedule at chosen steps, the weights' moving average
against its formula, and a bitwise resume of a run with all of them across a change of sequence length."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from maskplay import MaskplayModel
from maskplay.tasks.train import TrainConfig, train
from maskplay.tasks.train.checkpoint_files import read_tensors
from maskplay.tasks.train.config import OptimSection, load_train_config
from maskplay.tasks.train.data_schedule import DataSchedule, batch_size_at, length_at, scheduled
from maskplay.tasks.train.distributed import Dist
from maskplay.tasks.train.ema import EMA_FILE, WeightEma
from maskplay.tasks.train.lamb import Lamb
from maskplay.tasks.train.schedule import build_optimizer, learning_rate
from tests.tasks.train.test_train import (
    NO_DROPOUT,
    assert_same_weights,
    cli_command,
    make_data,
    small_config,
    train_losses,
    weights,
)
from tests.tasks.train.test_train_ddp import torchrun

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("data"))


RECIPE = ["optim.optimizer=lamb", "optim.betas=0.9,0.98", "optim.weight_decay=0.1", "optim.schedule=cosine-cooldown",
          "optim.warmup_steps=1", "optim.cooldown_steps=2", "optim.ema=0.9", "data.batch_ramp=0.5",
          "data.length_at=0.5", "data.length_to=32", "data.max_length=16", "data.bucket_window=1", "data.pack=true"]


# ---- LAMB -----------------------------------------------------------------------------------------------------

def regression_run(make_optimizer, steps: int = 25) -> list[torch.Tensor]:
    """A toy least-squares problem in float64: W (3 x 8) and b (3) trained by the optimizer make_optimizer([W, b])
    returns; the final [W, b]."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g, dtype=torch.float64), torch.randn(64, 3, generator=g, dtype=torch.float64)
    w = nn.Parameter(torch.randn(8, 3, generator=g, dtype=torch.float64))
    b = nn.Parameter(torch.randn(3, generator=g, dtype=torch.float64))
    optimizers = make_optimizer(w, b)
    for _ in range(steps):
        loss = ((x @ w + b - y) ** 2).mean()
        for opt in optimizers:
            opt.zero_grad()
        loss.backward()
        for opt in optimizers:
            opt.step()
    return [w.detach(), b.detach()]


def test_lamb_matches_torch_optimizer_where_their_definitions_agree():
    """torch-optimizer's Lamb differs from the paper's (and GPT-BERT's) LAMB in three ways: it takes the trust
    ratio on every parameter (`adam=True` turns it off everywhere), its bias correction scales the step (not m
    and v, so eps and weight decay enter unscaled), and it clamps ||w|| at clamp_value. They agree (1) on
    parameters without weight decay at any betas, with eps = 0 and torch-optimizer's adam=True, debias=True: both
    take Adam's bias-corrected step; (2) on decayed parameters where the bias corrections are 1 (betas 0, 0) and
    the clamp is out of reach: both take lr x ||w|| x u / ||u||, u = g / (|g| + eps) + wd x w."""
    torch_optimizer = pytest.importorskip("torch_optimizer")
    ours = regression_run(lambda w, b: [Lamb([w, b], lr=0.01, betas=(0.9, 0.98), eps=0.0)])
    theirs = regression_run(lambda w, b: [torch_optimizer.Lamb([w, b], lr=0.01, betas=(0.9, 0.98), eps=0.0,
                                                               adam=True, debias=True)])
    for a, t in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, t, rtol=1e-12, atol=1e-12)
    ours = regression_run(lambda w, b: [Lamb([{"params": [w, b], "weight_decay": 0.1}], lr=0.01, betas=(0.0, 0.0),
                                             eps=1e-8)])
    theirs = regression_run(lambda w, b: [torch_optimizer.Lamb([w, b], lr=0.01, betas=(0.0, 0.0), eps=1e-8,
                                                               weight_decay=0.1, clamp_value=1e9)])
    for a, t in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, t, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(ours[0], regression_run(lambda w, b: [Lamb([w, b], lr=0.01)])[0])  # the ratio acts


def naive_lamb(make_groups, steps: int, lr: float, betas: tuple[float, float], eps: float) -> list[np.ndarray]:
    """The paper's formula, one parameter and one element at a time, in float64 numpy: the oracle for the rest
    (real betas and eps together with weight decay, where torch-optimizer's definition differs)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g, dtype=torch.float64), torch.randn(64, 3, generator=g, dtype=torch.float64)
    w = nn.Parameter(torch.randn(8, 3, generator=g, dtype=torch.float64))
    b = nn.Parameter(torch.randn(3, generator=g, dtype=torch.float64))
    groups = make_groups(w, b)  # [(params, weight_decay)]
    moments = {id(p): (np.zeros(p.numel()), np.zeros(p.numel())) for params, _ in groups for p in params}
    for t in range(1, steps + 1):
        w.grad = b.grad = None
        ((x @ w + b - y) ** 2).mean().backward()
        for params, decay in groups:
            for p in params:
                m, v = moments[id(p)]
                grad, value = p.grad.numpy().ravel(), p.detach().numpy().ravel().copy()
                update = np.zeros_like(value)
                for i in range(len(value)):
                    m[i] = betas[0] * m[i] + (1 - betas[0]) * grad[i]
                    v[i] = betas[1] * v[i] + (1 - betas[1]) * grad[i] ** 2
                    m_hat, v_hat = m[i] / (1 - betas[0] ** t), v[i] / (1 - betas[1] ** t)
                    update[i] = m_hat / (math.sqrt(v_hat) + eps) + decay * value[i]
                ratio = 1.0
                if decay > 0:
                    w_norm, u_norm = math.sqrt(sum(a * a for a in value)), math.sqrt(sum(a * a for a in update))
                    ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
                with torch.no_grad():
                    p.copy_(torch.from_numpy(value - lr * ratio * update).view_as(p))
    return [w.detach().numpy(), b.detach().numpy()]


def test_lamb_matches_a_naive_loop_and_takes_the_trust_ratio_on_decayed_weights_only():
    kw = dict(lr=0.02, betas=(0.9, 0.98), eps=1e-8)
    ours = regression_run(lambda w, b: [Lamb([{"params": [w], "weight_decay": 0.1},
                                              {"params": [b], "weight_decay": 0.0}], **kw)], steps=15)
    oracle = naive_lamb(lambda w, b: [([w], 0.1), ([b], 0.0)], steps=15, **kw)
    for a, o in zip(ours, oracle, strict=True):
        np.testing.assert_allclose(a.numpy(), o, rtol=1e-10, atol=1e-12)


def test_lamb_is_built_from_the_config_and_its_state_has_adamws_layout():
    model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
    assert isinstance(build_optimizer(model, OptimSection()), torch.optim.AdamW)  # the default is unchanged
    opt = build_optimizer(model, OptimSection(optimizer="lamb", betas=[0.9, 0.98], weight_decay=0.1))
    assert isinstance(opt, Lamb) and [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert opt.param_groups[0]["param_names"] == ["0.weight"]  # biases and norm gains: no decay, no trust ratio
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    assert set(opt.state[model[0].weight]) == {"step", "exp_avg", "exp_avg_sq"}
    with pytest.raises(ValueError, match="optim.optimizer must be one of"):
        OptimSection(optimizer="sgd")


# ---- the learning-rate schedule -------------------------------------------------------------------------------

def test_cosine_cooldown_schedule_at_chosen_steps():
    optim = OptimSection(lr=2.0, schedule="cosine-cooldown", warmup_steps=16, cooldown_steps=16, max_steps=1000,
                         min_lr_ratio=0.1)
    rate = [learning_rate(s, optim) for s in range(1001)]
    assert rate[0] == 2.0 / 16 and rate[7] == 2.0 * 8 / 16 and rate[15] == 2.0  # warmup, as the linear schedule's
    assert rate[16] == 2.0  # the cosine starts at lr
    mid = 16 + (1000 - 16 - 16) // 2  # progress 1/2: halfway between lr and 0.1 lr
    assert rate[mid] == pytest.approx(2.0 * (0.1 + 0.9 * 0.5), rel=1e-12)
    assert rate[300] == pytest.approx(2.0 * (0.1 + 0.45 * (1 + math.cos(math.pi * 284 / 968))), rel=1e-12)
    assert rate[984] == pytest.approx(0.2, rel=1e-12) and rate[983] > 0.2  # the cosine ends at 0.1 lr ...
    assert rate[992] == pytest.approx(0.2 * 8 / 16) and rate[999] == pytest.approx(0.2 / 16) and rate[1000] == 0
    assert all(a >= b for a, b in zip(rate[15:], rate[16:], strict=False))  # ... and never rises after warmup
    # the cooldown is the authors' (pretraining/utils.py): min_factor x (T - s) / C over the last C steps
    assert all(rate[s] == pytest.approx(2.0 * 0.1 * (1000 - s) / 16) for s in range(984, 1000))
    linear = OptimSection(lr=2.0, warmup_steps=16, max_steps=1000)
    assert linear.schedule == "linear" and learning_rate(500, linear) == 2.0 * 500 / 984


def test_schedule_and_recipe_config_errors(data):
    for bad, match in [("optim.schedule=cosine", "optim.schedule must be one of"),
                       ("optim.ema=1", r"optim.ema must be in \[0, 1\)"),
                       ("data.batch_ramp=1.5", r"data.batch_ramp must be in \[0, 1\]"),
                       ("data.length_at=0.9,0.7", "increasing shares"),
                       ("optim.cooldown_steps=2", "needs optim.schedule")]:
        with pytest.raises(ValueError, match=match):
            small_config(data, data / "unused", bad)
    with pytest.raises(ValueError, match="exceeds optim.max_steps"):
        small_config(data, data / "unused", "optim.schedule=cosine-cooldown", "optim.cooldown_steps=7")
    with pytest.raises(ValueError, match="must be as long as each other"):
        small_config(data, data / "unused", "data.length_at=0.5", "data.bucket_window=1")
    with pytest.raises(ValueError, match="set data.bucket_window = 1"):
        small_config(data, data / "unused", "data.batch_ramp=0.5")


# ---- the data schedules ---------------------------------------------------------------------------------------

def test_batch_ramp_and_length_schedule_at_chosen_steps():
    cfg = TrainConfig()
    assert not scheduled(cfg) and batch_size_at(0, cfg) == cfg.data.batch_size and length_at(0, cfg) == 128
    cfg.optim.max_steps, cfg.data.batch_size, cfg.data.max_length = 1000, 64, 128
    cfg.data.batch_ramp, cfg.data.length_at, cfg.data.length_to = 0.5, [0.7, 0.9], [256, 512]
    sizes = {s: (batch_size_at(s, cfg), length_at(s, cfg)) for s in (0, 250, 499, 500, 699, 700, 899, 900, 999)}
    assert sizes == {0: (16, 128), 250: (40, 128), 499: (64, 128), 500: (64, 128), 699: (64, 128),
                     700: (32, 256), 899: (32, 256), 900: (16, 512), 999: (16, 512)}
    # a quarter -> full over batch_ramp x max_steps: 64 x (0.25 + 0.75 x 100 / 500) = 25.6 -> 26
    assert batch_size_at(100, cfg) == 26
    # tokens per step are constant once the ramp is done
    assert {batch_size_at(s, cfg) * length_at(s, cfg) for s in range(500, 1000)} == {64 * 128}


def test_scheduled_epochs_follow_the_step_and_end_where_the_length_changes():
    cfg = TrainConfig()
    cfg.optim.max_steps, cfg.data.batch_size, cfg.data.max_length = 40, 8, 16
    cfg.data.batch_ramp, cfg.data.length_at, cfg.data.length_to = 0.5, [0.5], [32]
    cfg.data.pack = True
    lengths = np.random.default_rng(0).integers(3, 12, 200)
    schedule = DataSchedule(cfg, lengths)
    plan = schedule.plan(0)  # epoch 0: from step 0, batches of 2, 2, 3, ... packed rows of 16 pieces
    assert [int(s) for s in plan[:, 1]] == [batch_size_at(s, cfg) for s in range(len(plan))]
    assert np.array_equal(plan[1:, 0], np.cumsum(plan[:-1, 1]))  # consecutive slices of the shuffled order
    assert len(plan) == 20 and plan[-1].sum() < schedule.num_items(16)  # ends at the change to 32, rows left
    assert len(schedule.plan(15)) == 5  # an epoch started at step 15 ends there too
    late = schedule.plan(20)  # 32 pieces: the split packed again into fewer, longer rows, batches of 4
    n = schedule.num_items(32)
    assert n < schedule.num_items(16) and set(late[:, 1].tolist()) == {4} == {batch_size_at(20, cfg)}
    assert late[-1].sum() <= n < late[-1].sum() + 4  # this one ends when the split is used up
    schedule.check(Dist())
    cfg.optim.grad_accum = 3
    with pytest.raises(ValueError, match="fewer than optim.grad_accum x processes = 3"):
        schedule.check(Dist())


@pytest.mark.parametrize("family", ["tta", "gpt"])
def test_uneven_micro_batches_of_a_scheduled_batch_equal_the_big_batch(data, tmp_path, family):
    """A scheduled batch (here 4 .. 16 sequences) is cut into grad_accum micro-batches as evenly as it divides
    (3: sizes like 2, 1, 1); the loss is normalised by the global target count, so the weights are the big
    batch's."""
    extra = [*NO_DROPOUT, "data.batch_ramp=0.5", "data.length_at=0.5", "data.length_to=32", "data.max_length=16",
             "data.bucket_window=1", "data.batch_size=12"]
    one = train(small_config(data, tmp_path / "one", *extra, family=family))
    three = train(small_config(data, tmp_path / "three", *extra, "optim.grad_accum=3", family=family))
    assert one.step == three.step == 8
    assert_same_weights(weights(one.run_dir), weights(three.run_dir), exact=False)


# ---- the weights' moving average ------------------------------------------------------------------------------

def test_ema_update_is_its_formula_and_applied_swaps_back():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4))
    model[1].weight.requires_grad_(False)  # frozen parameters are not averaged
    ema = WeightEma(model, 0.9)
    assert ema.names == ["0.weight", "0.bias", "1.bias"]
    expected = [p.detach().double().clone() for p in ema.params]
    for _ in range(5):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        ema.update()
        expected = [0.9 * e + 0.1 * p.detach().double() for e, p in zip(expected, ema.params, strict=True)]
    for e, s in zip(expected, ema.shadow, strict=True):
        torch.testing.assert_close(s.double(), e, rtol=1e-6, atol=1e-6)
    raw = {k: v.clone() for k, v in model.state_dict().items()}
    with ema.applied():
        assert torch.equal(model[0].weight, ema.shadow[0]) and not torch.equal(model[0].weight, raw["0.weight"])
    assert all(torch.equal(v, raw[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="missing"):
        ema.load({"0.weight": ema.shadow[0]}, source="x")


def test_debiased_ema_is_the_decayed_average_of_the_trained_weights_alone():
    """optim.ema_debias: after t steps the average is sum_i d^(t-i) w_i / sum_i d^(t-i) over the weights after each
    step, the initial weights not in it (against that sum written out, in float64); without it the initial weights
    keep their share d^t."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    initial = [p.detach().double().clone() for p in model.parameters()]
    debiased, plain = WeightEma(model, 0.8, debias=True), WeightEma(model, 0.8)
    seen = []
    for t in range(1, 7):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        seen.append([p.detach().double().clone() for p in model.parameters()])
        debiased.update(t)
        plain.update(t)
        weights = [0.8 ** (t - i) for i in range(1, t + 1)]
        for k, s in enumerate(debiased.shadow):
            expected = sum(w * ws[k] for w, ws in zip(weights, seen, strict=True)) / sum(weights)
            torch.testing.assert_close(s.double(), expected, rtol=1e-6, atol=1e-6)
        for k, s in enumerate(plain.shadow):  # the same sum, unnormalised, plus the initial weights' share
            expected = 0.2 * sum(w * ws[k] for w, ws in zip(weights, seen, strict=True)) + 0.8 ** t * initial[k]
            torch.testing.assert_close(s.double(), expected, rtol=1e-6, atol=1e-6)
    assert WeightEma(model, 0.5, debias=True).decay_at(1) == 0.0
    with pytest.raises(ValueError, match="optimizer steps"):
        debiased.update()
    with pytest.raises(ValueError, match="optim.ema_debias"):
        OptimSection(ema_debias=True)


def test_a_debiased_average_resumes_bitwise(data, tmp_path):
    extra = [*RECIPE, "optim.ema_debias=true"]
    whole = train(small_config(data, tmp_path / "whole", *extra, family="gpt"))
    train(small_config(data, tmp_path / "part", *extra, "run.stop_at_step=3", family="gpt"))
    rest = train(small_config(data, tmp_path / "part", *extra, family="gpt"), resume=True)
    for which in ("final", "final-raw"):
        assert_same_weights(weights(whole.run_dir, which), weights(rest.run_dir, which))
    plain = train(small_config(data, tmp_path / "plain", *RECIPE, family="gpt"))
    assert_same_weights(weights(whole.run_dir, "final-raw"), weights(plain.run_dir, "final-raw"))
    assert not torch.equal(weights(whole.run_dir)["head.bias"], weights(plain.run_dir)["head.bias"])


@pytest.mark.parametrize("family", ["bert", "gpt-bert"])
def test_recipe_run_resumes_bitwise_across_a_length_change_and_exports_the_average(data, tmp_path, family):
    """LAMB + cosine-cooldown + EMA + batch ramp + a length change at step 4 (16 -> 32 pieces, packed rows):
    stopped at step 3 and resumed, it ends bitwise where one run ends, moving average included; final/ is the
    average (the checkpoint's ema.safetensors), final-raw/ the trained weights (its model.safetensors)."""
    whole = train(small_config(data, tmp_path / "whole", *RECIPE, family=family))
    part = train(small_config(data, tmp_path / "part", *RECIPE, "run.stop_at_step=3", family=family))
    assert part.step == 3
    rest = train(small_config(data, tmp_path / "part", *RECIPE, family=family), resume=True)
    assert rest.step == 8 and train_losses(whole.run_dir) == train_losses(rest.run_dir)
    for which in ("final", "final-raw", "ckpt-000008"):
        assert_same_weights(weights(whole.run_dir, which), weights(rest.run_dir, which))
    # from the checkpoint written at the change itself (step 4: epoch 0 used up, saved as epoch 1, position 0)
    assert json.loads((whole.run_dir / "ckpt-000004" / "state.json").read_text())["step_in_epoch"] == 0
    again = train(small_config(data, tmp_path / "again", *RECIPE, family=family),
                  resume_from=whole.run_dir / "ckpt-000004")
    assert again.step == 8
    for which in ("final", "final-raw"):
        assert_same_weights(weights(whole.run_dir, which), weights(again.run_dir, which))
    last = whole.run_dir / "ckpt-000008"
    assert_same_weights(weights(whole.run_dir, "final-raw"), read_tensors(last / "model.safetensors"))
    average = read_tensors(last / EMA_FILE)
    final = weights(whole.run_dir, "final")
    assert average and all(torch.equal(final[name], value) for name, value in average.items())
    assert not torch.equal(final["head.bias"], weights(whole.run_dir, "final-raw")["head.bias"])
    assert MaskplayModel.from_pretrained(whole.final_dir).family == family
    logged = [json.loads(line) for line in (whole.run_dir / "metrics.jsonl").read_text().splitlines()]
    shapes = {m["step"]: (m["batch_size"], m["seq_length"]) for m in logged if "batch_size" in m}
    cfg = small_config(data, tmp_path / "unused", *RECIPE)
    assert shapes == {s + 1: (batch_size_at(s, cfg), length_at(s, cfg)) for s in range(8)}
    assert shapes[1] == (4, 16) and shapes[8] == (8, 32)
    assert any("ema_eval_loss" in m for m in logged)


@pytest.mark.heavy
@pytest.mark.slow
def test_two_processes_with_the_recipe_give_the_weights_of_one(data, tmp_path):
    """Under torchrun (2 processes x grad_accum 2), each scheduled batch is cut into 4 micro-batches, unevenly
    where it does not divide (7 -> 2, 2, 2, 1); with LAMB and the moving average the weights (both exports) are
    still one process's."""
    extra = [*NO_DROPOUT, *RECIPE]  # batches of 4, 7, 10, 13 rows of 16 pieces, then 8 of 32
    one = train(small_config(data, tmp_path / "one", *extra, family="gpt"))
    two = torchrun(cli_command(data, tmp_path / "two", *extra, "optim.grad_accum=2", family="gpt"))
    assert two.stdout.count("reached optim.max_steps") == 1
    for which in ("final", "final-raw"):
        assert_same_weights(weights(one.run_dir, which), weights(tmp_path / "two", which), exact=False)


# ---- the recipe's config --------------------------------------------------------------------------------------

def test_gpt_bert_recipe_config_uses_the_options():
    cfg = load_train_config(REPO / "configs" / "gpt-bert-recipe.toml").validate()
    assert cfg.model.family == "gpt-bert" and cfg.model.build({}).max_position >= max(cfg.data.length_to)
    o, d = cfg.optim, cfg.data
    assert (o.optimizer, o.schedule, o.betas, o.min_lr_ratio, o.ema) == ("lamb", "cosine-cooldown", [0.9, 0.98],
                                                                         0.1, 0.999)
    assert o.warmup_steps == o.cooldown_steps == round(0.016 * o.max_steps)
    assert (d.batch_ramp, d.batch_ramp_start, d.max_length, d.length_at, d.length_to) == (1.0, 0.25, 128,
                                                                                          [0.7, 0.9], [256, 512])
    assert d.pack and scheduled(cfg)


def test_lamb_on_all_tensors_at_once_is_the_per_tensor_loop():
    """The default foreach update (torch._foreach_*) against foreach=False, the loop one tensor at a time: a
    decayed group with the trust ratio, a plain-Adam group, a parameter with no gradient, ten steps."""
    def run(foreach: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        ws = [torch.nn.Parameter(torch.randn(*shape)) for shape in [(5, 3), (7,), (2, 2, 4), (3,)]]
        opt = Lamb([{"params": ws[:2], "weight_decay": 0.1}, {"params": ws[2:], "weight_decay": 0.0}],
                   lr=0.01, betas=(0.9, 0.98), foreach=foreach)
        for _ in range(10):
            loss = sum(((w - 0.5) ** 2 * (i + 1)).sum() for i, w in enumerate(ws[:3]))  # ws[3] gets no gradient
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return [w.detach().clone() for w in ws] + [opt.state[w]["exp_avg_sq"] for w in ws[:3]]

    together, one_by_one = run(True), run(False)
    for a, b in zip(together, one_by_one, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    torch.manual_seed(0)
    start = torch.randn(5, 3)
    assert (together[0] - start).abs().min() > 0  # both moved every weight: the comparison is not of two no-ops


def test_flex_attention_is_the_runs_switch_and_refused_off_a_gpu(data, tmp_path, monkeypatch):
    """run.flex_attention holds while the run trains (flex.enabled inside Trainer.run, as a CUDA process would see
    it) and not after it; on a CPU the run stops at its start with one line naming the field."""
    from maskplay.nn.attention import flex
    from maskplay.tasks.train import loop

    seen = []

    class Recording:  # a trainer that only looks
        metrics = None

        def __init__(self, *args, **kwargs) -> None:
            pass

        def run(self) -> str:
            seen.append(flex.enabled)
            return "ran"

    with monkeypatch.context() as patch:
        patch.setattr(loop, "setup_processes", lambda *a: Dist(device=torch.device("cuda")))
        for on in (True, False):
            assert train(small_config(data, tmp_path / f"run-{on}", f"run.flex_attention={str(on).lower()}"),
                         trainer_class=Recording) == "ran"
    assert seen == [True, False] and not flex.enabled
    with pytest.raises(ValueError, match="run.flex_attention = true trains on a CUDA device only"):
        train(small_config(data, tmp_path / "cpu", "run.flex_attention=true"))
