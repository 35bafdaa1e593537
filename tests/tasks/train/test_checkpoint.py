"""Checkpoint files: atomic writes, checksums that catch corruption by file name, fallback, pruning, and
lossless optimizer / RNG state (no pickle anywhere)."""

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from maskplay import preset
from maskplay.families import build_model
from maskplay.tasks.train import checkpoint_files as ckpt
from maskplay.tasks.train.config import OptimSection
from maskplay.tasks.train.schedule import build_optimizer


def write(run_dir: Path, step: int, value: float = 1.0) -> Path:
    return ckpt.write_checkpoint(run_dir, step, {
        name: {"x": torch.full((4, 3), value + step)} for name in (ckpt.MODEL_FILE, ckpt.OPTIMIZER_FILE, ckpt.RNG_FILE)
    }, {name: {"step": step} for name in (ckpt.STATE_FILE, ckpt.CONFIG_FILE, ckpt.MODEL_CONFIG_FILE)})


def test_write_is_complete_and_leaves_no_temporary_files(tmp_path):
    path = write(tmp_path, 7)
    assert path == tmp_path / "ckpt-000007"
    manifest = ckpt.verify_checkpoint(path)
    assert sorted(manifest["files"]) == sorted(ckpt.REQUIRED)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-000007"]
    # the same step again replaces it whole
    write(tmp_path, 7, value=5.0)
    assert ckpt.read_tensors(path / ckpt.MODEL_FILE)["x"][0, 0] == 12.0
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-000007"]


@pytest.mark.parametrize("damage, message", [
    ("flip", r"model\.safetensors does not match its sha256"),
    ("truncate", r"model\.safetensors has \d+ bytes, the manifest says \d+"),
    ("delete", r"model\.safetensors is missing"),
    ("no_manifest", r"manifest\.json is missing"),
    ("bad_manifest", r"manifest\.json is unreadable"),
])
def test_damage_is_detected_naming_the_file_and_the_previous_checkpoint_is_used(tmp_path, damage, message):
    write(tmp_path, 2)
    bad = write(tmp_path, 4)
    target = bad / ckpt.MODEL_FILE
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[-1] ^= 0x01
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-5])
    elif damage == "delete":
        target.unlink()
    elif damage == "no_manifest":
        (bad / ckpt.MANIFEST).unlink()
    else:
        (bad / ckpt.MANIFEST).write_text("{not json")
    with pytest.raises(ckpt.CheckpointError, match=message):
        ckpt.verify_checkpoint(bad)
    warnings = []
    assert ckpt.latest_valid_checkpoint(tmp_path, warn=warnings.append) == tmp_path / "ckpt-000002"
    assert len(warnings) == 1 and "ckpt-000004" in warnings[0] and re.search(message, warnings[0])


def test_no_usable_checkpoint_is_an_error_naming_each_problem(tmp_path):
    state = write(tmp_path, 1) / ckpt.STATE_FILE
    state.write_text(state.read_text().replace("1", "9"))  # same size, other content
    with pytest.raises(ckpt.CheckpointError, match=r"no usable checkpoint.*state\.json does not match"):
        ckpt.latest_valid_checkpoint(tmp_path, warn=lambda m: None)
    assert ckpt.latest_valid_checkpoint(tmp_path / "empty") is None


def test_prune_keeps_the_newest(tmp_path):
    for step in (3, 10, 20, 100):
        write(tmp_path, step)
    deleted = ckpt.prune_checkpoints(tmp_path, keep=2)
    assert [p.name for p in deleted] == ["ckpt-000003", "ckpt-000010"]
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [20, 100]


def test_partial_writes_are_cleaned_and_a_checkpoint_moved_aside_is_restored(tmp_path):
    write(tmp_path, 5)
    (tmp_path / ".tmp-ckpt-000006-123").mkdir()  # killed while writing step 6
    (tmp_path / "ckpt-000005").rename(tmp_path / ".old-ckpt-000005-99")  # killed while replacing step 5
    ckpt.remove_partial_writes(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000005"]
    ckpt.verify_checkpoint(tmp_path / "ckpt-000005")


def _adam(seed: int):
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family="bert"))
    return model, build_optimizer(model, OptimSection(lr=1e-2))


def _adam_step(model, opt, seed):
    torch.manual_seed(seed)  # dropout
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(7, 100, (3, 9), generator=g)
    model(**model.training_batch(ids, torch.ones_like(ids, dtype=torch.bool), generator=g)).loss.backward()
    opt.step()
    opt.zero_grad()


def test_optimizer_state_round_trips_exactly(tmp_path):
    model, opt = _adam(0)
    for s in range(3):
        _adam_step(model, opt, s)
    tensors, groups = ckpt.optimizer_to_tensors(opt)
    assert any(k.startswith("state/embeddings.word.weight/") for k in tensors)
    # through the real file formats: safetensors and JSON
    from safetensors.torch import load_file, save_file

    save_file(tensors, str(tmp_path / "o.safetensors"))
    groups = json.loads(json.dumps(groups))
    model2, opt2 = _adam(1)
    model2.load_state_dict(model.state_dict())
    ckpt.optimizer_from_tensors(opt2, load_file(str(tmp_path / "o.safetensors")), groups)
    _adam_step(model, opt, 10)
    _adam_step(model2, opt2, 10)
    for (name, a), b in zip(model.state_dict().items(), model2.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    # a mismatch of parameters is named
    groups[0]["param_names"][0] = "nope.weight"
    with pytest.raises(ckpt.CheckpointError, match="nope.weight"):
        ckpt.optimizer_from_tensors(opt2, tensors, groups)


def test_rng_states_round_trip():
    gen = torch.Generator().manual_seed(3)
    random.gauss(0, 1)  # leaves a cached gaussian in python's state
    np.random.standard_normal()
    states = ckpt.rng_to_tensors(gen, torch.device("cpu"))

    def draw():
        return (random.random(), random.gauss(0, 1), np.random.rand(), np.random.standard_normal(),
                torch.rand(3).tolist(), torch.rand(2, generator=gen).tolist())

    first = draw()
    ckpt.rng_from_tensors(states, gen, torch.device("cpu"))
    assert draw() == first


def test_nothing_in_the_trainer_unpickles():
    source = Path(ckpt.__file__).parent
    for file in source.glob("*.py"):
        text = file.read_text()
        assert "torch.load(" not in text and "import pickle" not in text, file
        assert "allow_pickle=True" not in text, file
