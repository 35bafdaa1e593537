"""data.pin_memory: on a CUDA device each micro-batch goes to the GPU through page-locked host memory
(train/stepping.to_device). This CPU-only torch cannot pin, so Tensor.pin_memory is replaced by a copy that records
its calls, and the pinned path is forced on: the run must pin every micro-batch tensor and train to the very same
weights as a run without pinning."""

from __future__ import annotations

import torch

import maskplay.tasks.train.stepping as stepping
from maskplay.tasks.train import train
from tests.tasks.train.test_train import assert_same_weights, data, small_config, weights  # noqa: F401 (data: a fixture)


def fake_pinning(monkeypatch) -> list[tuple[int, ...]]:
    pinned: list[tuple[int, ...]] = []

    def pin(self: torch.Tensor) -> torch.Tensor:
        pinned.append(tuple(self.shape))
        return self.clone()

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    return pinned


def test_to_device_pins_only_when_asked(monkeypatch):
    pinned = fake_pinning(monkeypatch)
    batch = {"input_ids": torch.arange(6).view(2, 3), "attention_mask": torch.ones(2, 3, dtype=torch.bool)}
    plain = stepping.to_device(batch, torch.device("cpu"), pin=False)
    assert not pinned
    moved = stepping.to_device(batch, torch.device("cpu"), pin=True)
    assert pinned == [(2, 3), (2, 3)]
    assert all(torch.equal(moved[k], plain[k]) and moved[k].dtype == plain[k].dtype for k in batch)


def test_pinning_is_on_for_cuda_only(data, tmp_path):  # noqa: F811
    config = small_config(data, tmp_path)
    assert stepping.pins(config, torch.device("cuda"))
    assert not stepping.pins(config, torch.device("cpu"))
    off = small_config(data, tmp_path, "data.pin_memory=false")
    assert not stepping.pins(off, torch.device("cuda"))


def test_pinned_batches_train_the_same_weights(data, tmp_path, monkeypatch):  # noqa: F811
    plain = train(small_config(data, tmp_path / "a", "optim.max_steps=2", family="gpt"))
    pinned = fake_pinning(monkeypatch)
    monkeypatch.setattr(stepping, "pins", lambda config, device: True)
    run = train(small_config(data, tmp_path / "b", "optim.max_steps=2", family="gpt"))
    # input_ids, attention_mask, labels and the labelled positions (nn/outputs.labelled_rows_known) of each step's
    # one micro-batch
    assert len(pinned) == 2 * 4
    assert_same_weights(weights(plain.run_dir), weights(run.run_dir))
