"""data.prepare_ahead: the next step's micro-batches fetched and made into the family's batches (masking on the host,
then sent to the device) after this step's backward is queued and before the host waits for its loss. The oracle is
the same run with it off: the same weights, metrics, checkpoints and held-out losses, bitwise, across an epoch's end,
with and without packing, a batch schedule, gradient accumulation and Transformer-XL's memory; a run resumed from a
checkpoint written while a step was made ahead ends where the uninterrupted one ends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from maskplay.tasks.train import checkpoint_files as ckpt
from maskplay.tasks.train import stepping, train
from tests.tasks.train.test_train import assert_same_weights, make_data, small_config, weights

# 160 sequences: 10 steps of 16 an epoch, so 14 steps cross into the second epoch
LONG = ["optim.max_steps=14", "run.save_every=5", "run.eval_every=3"]
CASES = {
    # GPT-BERT's masking (its rate follows the step) in the strict-small recipes' data path: packed rows, a batch
    # ramp and a length schedule (train/data_schedule.py), LAMB and the moving average
    "gpt-bert recipe": ("gpt-bert", ["optim.optimizer=lamb", "optim.schedule=cosine-cooldown", "optim.cooldown_steps=2",
                                     "optim.ema=0.9", "data.batch_ramp=0.5", "data.length_at=0.5", "data.length_to=32",
                                     "data.max_length=16", "data.bucket_window=1", "data.pack=true"]),
    "bert, two micro-batches": ("bert", ["optim.grad_accum=2"]),
    "gpt, memory over a stream": ("gpt", ["model.positions=alibi", "data.stream=true", "data.max_length=16",
                                          "run.memory_length=8"]),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("data"))


def records(run_dir: Path) -> list[dict]:
    """metrics.jsonl without its clocks."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in ("elapsed_s", "tokens_per_s", "time")}
            for line in lines]


def state(checkpoint: Path) -> dict:
    """A checkpoint's state.json without its clocks."""
    saved = json.loads((checkpoint / ckpt.STATE_FILE).read_text())
    return {k: v for k, v in saved.items() if k not in ("saved_at", "elapsed_s")}


def assert_same_runs(a: Path, b: Path) -> tuple[list[dict], list[str]]:
    """Two run directories with the same final weights, metrics (clocks aside) and checkpoints (their states, clocks
    aside, and RNG streams), two checkpoints at least; returns the metrics and the checkpoints' names."""
    assert_same_weights(weights(a), weights(b))
    logged = records(b)
    assert logged == records(a)
    checkpoints = sorted(p.name for p in b.glob("ckpt-*"))
    assert checkpoints == sorted(p.name for p in a.glob("ckpt-*")) and len(checkpoints) >= 2
    for name in checkpoints:
        assert state(b / name) == state(a / name)
        assert_same_weights(load_file(str(b / name / ckpt.RNG_FILE)), load_file(str(a / name / ckpt.RNG_FILE)))
    return logged, checkpoints


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_same_run_with_and_without_making_the_next_step_ahead(data, tmp_path, case):
    family, extra = CASES[case]
    runs = {ahead: train(small_config(data, tmp_path / str(ahead), *LONG, *extra, f"data.prepare_ahead={ahead}",
                                      family=family))
            for ahead in (False, True)}
    assert runs[False].step == runs[True].step == 14
    # each checkpoint written while the next step's batches had been made (and its RNG drawn)
    logged, _ = assert_same_runs(runs[False].run_dir, runs[True].run_dir)
    assert max(r.get("epoch", 0) for r in logged) >= 1, "the runs should cross an epoch's end"
    assert sum("eval_loss" in r for r in logged) >= 4  # evaluated between steps made ahead, and at the end


@pytest.mark.slow
def test_a_resume_from_a_checkpoint_written_with_a_step_made_ahead_is_exact(data, tmp_path):
    """When ckpt-000010 was written, step 11's batches had been fetched and masked (drawing from the generator the
    checkpoint holds); resumed from it, the run ends bitwise where the uninterrupted one ended, in the recipe's
    data path, whose epoch ends at step 8."""
    family, extra = CASES["gpt-bert recipe"]
    whole = train(small_config(data, tmp_path / "whole", *LONG, *extra, family=family))
    part = tmp_path / "part"
    shutil.copytree(whole.run_dir, part)
    shutil.rmtree(part / "final")
    rest = train(small_config(data, part, *LONG, *extra, family=family), resume=True,
                 resume_from=part / "ckpt-000010")
    assert rest.step == 14
    assert json.loads((part / "ckpt-000010" / ckpt.STATE_FILE).read_text())["epoch"] == 1
    assert records(part)[-3:] == records(whole.run_dir)[-3:]  # steps 13 and 14, as the resumed run logged them
    assert_same_weights(weights(whole.run_dir), weights(part))


@pytest.mark.parametrize("ahead", [False, True])
def test_the_next_steps_batches_are_made_before_the_host_waits_for_the_loss(data, tmp_path, monkeypatch, ahead):
    """The order of the host's work: with data.prepare_ahead every step but the last makes its successor's batch
    before it reads the device (read_back), and nothing is made that no step uses."""
    events: list[str] = []
    read_back, prepare = stepping.read_back, stepping.Stepper.prepare

    def reading(tensors: list[torch.Tensor]) -> list[float]:
        events.append("read")
        return read_back(tensors)

    def making(self: stepping.Stepper, step: int, ids: torch.Tensor, mask: torch.Tensor) -> stepping.Prepared:
        events.append(f"make {step}")
        return prepare(self, step, ids, mask)

    monkeypatch.setattr(stepping, "read_back", reading)
    monkeypatch.setattr(stepping.Stepper, "prepare", making)
    steps = 5
    train(small_config(data, tmp_path / "r", f"optim.max_steps={steps}", "run.eval_every=0", "run.save_every=0",
                       f"data.prepare_ahead={ahead}", family="bert"))
    if ahead:
        expected = ["make 0", *[e for k in range(1, steps) for e in (f"make {k}", "read")], "read"]
    else:
        expected = [e for k in range(steps) for e in (f"make {k}", "read")]
    assert events == expected
