"""run.check_every_step = false: the host reads the steps' losses and gradient norms only where it needs them (a
logged step, an evaluation, a checkpoint, a word mark, the end), not at every step's end. The oracle is the same
run reading every step: the same weights, metrics, checkpoints and held-out losses, bitwise; and the reads counted
(stepping.read_back, the one place a step reads the device). A nan then stops the run at its next read:
tests/test_reliability.py."""

from __future__ import annotations

import pytest

from maskplay.tasks.train import stepping, train
from tests.tasks.train.test_prepare_ahead import CASES, LONG, assert_same_runs
from tests.tasks.train.test_prepare_ahead import data as data  # noqa: F401, PLC0414 - the module's fixture
from tests.tasks.train.test_train import small_config


@pytest.mark.slow
@pytest.mark.parametrize("case", ["gpt-bert recipe", "bert, two micro-batches"])
def test_the_same_run_whether_each_step_is_read_or_not(data, tmp_path, case):  # noqa: F811
    family, extra = CASES[case]
    # logged every 4 steps, evaluated every 3, saved every 5: steps read one, two or three at a time
    runs = {check: train(small_config(data, tmp_path / str(check), *LONG, *extra, "run.log_every=4",
                                      f"run.check_every_step={check}", family=family))
            for check in (True, False)}
    assert runs[True].step == runs[False].step == 14
    logged, _ = assert_same_runs(runs[True].run_dir, runs[False].run_dir)
    assert [r["step"] for r in logged if "loss" in r] == [4, 8, 12, 14]


@pytest.mark.parametrize("check", [True, False])
def test_the_device_is_read_only_where_the_run_needs_the_loss(data, tmp_path, monkeypatch, check):  # noqa: F811
    reads: list[int] = []
    read_back = stepping.read_back

    def counted(tensors):
        reads.append(len(tensors))
        return read_back(tensors)

    monkeypatch.setattr(stepping, "read_back", counted)
    train(small_config(data, tmp_path / "r", "optim.max_steps=10", "run.log_every=5", "run.eval_every=0",
                       "run.save_every=0", "optim.grad_accum=2", f"run.check_every_step={check}", family="bert"))
    # each step's two micro-batches' losses and its norm: 3 values a step, read at its end or 5 steps at once
    assert reads == ([3] * 10 if check else [15, 15])
