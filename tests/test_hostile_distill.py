"""`maskplay distill` and `distill prepare` under hostile or careless input: damaged, incomplete or mixed targets
stores (truncated or garbage shards, a shard of another top-k or another store, meta.json missing its splits or
with zero sequences), a store of other data, a refused start's leftovers, a HuggingFace teacher that cannot teach
or that differs from the one converted before into the same place. Each is one line naming the file before any
work, and leaves nothing that refuses the corrected rerun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from maskplay.cli import main as cli_main
from maskplay.data.dataset import write_split
from maskplay.data.tokenizer import load_tokenizer
from maskplay.tasks.distill import DistillConfig, StoredTargets, TeacherPass, distill, load_teacher, prepare_targets
from maskplay.tasks.distill.store import teacher_identity
from tests.tasks.distill.test_distill import save_teacher
from tests.tasks.train.test_train import make_data, small_config

REPO = Path(__file__).resolve().parents[1]
SHARD = 16  # sequences per shard: train has 40, so three shards


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """Data, two teachers, and the stores each made (top 4), plus one of the first teacher at top 8."""
    root = tmp_path_factory.mktemp("hostile-distill")
    data = make_data(root / "data", n_train=40, n_valid=8)
    t1, t2 = save_teacher(root / "t1", data), save_teacher(root / "t2", data, seed=1)
    for name, teacher, k in (("s1", t1, 4), ("s2", t2, 4), ("s1k8", t1, 8)):
        prepare_targets(teacher, data, root / name, top_k=k, max_length=32, shard_sequences=SHARD)
    return {"root": root, "data": data, "t1": t1, "t2": t2, "s1": root / "s1", "s2": root / "s2",
            "s1k8": root / "s1k8"}


def _meta(store: Path, **changes) -> None:
    meta = json.loads((store / "meta.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key)
        else:
            meta[key] = value
    (store / "meta.json").write_text(json.dumps(meta))


def _cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


SHARD1 = "train-00001.safetensors"
DAMAGE = {
    "truncated header": (lambda w, d: _cut(d / SHARD1, 200), f"{SHARD1} is damaged: not a readable targets shard"),
    "truncated data": (lambda w, d: _cut(d / SHARD1, (d / SHARD1).stat().st_size - 40),
                       f"{SHARD1} is damaged: not a readable targets shard"),
    "garbage": (lambda w, d: (d / SHARD1).write_bytes(b"\x00" * 5000), f"{SHARD1} is damaged"),
    "missing": (lambda w, d: (d / SHARD1).unlink(), f"{SHARD1} not found"),
    "another top-k's shard": (lambda w, d: shutil.copy(w["s1k8"] / SHARD1, d / SHARD1),
                              f"{SHARD1} is not a shard of {{d}}: it was written for other settings (top_k differ)"),
    "another store's shard": (lambda w, d: shutil.copy(w["s2"] / SHARD1, d / SHARD1),
                              f"{SHARD1} is not a shard of {{d}}: it was written for another teacher"),
    "shards swapped": (lambda w, d: shutil.copy(d / "train-00000.safetensors", d / SHARD1),
                       "first_sequence differ"),
    "no splits": (lambda w, d: _meta(d, splits=None), "meta.json is damaged: splits must be"),
    "zero sequences": (lambda w, d: _meta(d, splits={"train": {"sequences": 0, "tokens": 0}}),
                       "the targets hold no training sequence"),
    "splits a list": (lambda w, d: _meta(d, splits=["train"]), "meta.json is damaged: splits must be"),
    "negative sequences": (lambda w, d: _meta(d, splits={"train": {"sequences": -3}}),
                           "splits.train.sequences must be a whole number >= 0, not -3"),
    "zero shard_sequences": (lambda w, d: _meta(d, shard_sequences=0),
                             "shard_sequences must be a whole number >= 1, not 0"),
    "top_k a string": (lambda w, d: _meta(d, top_k="x"), "top_k must be a whole number >= 1, not 'x'"),
    "no teacher": (lambda w, d: _meta(d, teacher=None), "teacher.weights_sha256 must be"),
    "unknown format": (lambda w, d: _meta(d, format=99), "format 99"),
    "meta not json": (lambda w, d: (d / "meta.json").write_bytes(b"\xff{"), "meta.json is damaged"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_store_is_one_error_naming_the_file(world, tmp_path, case):
    edit, message = DAMAGE[case]
    store = tmp_path / "store"
    shutil.copytree(world["s1"], store)
    edit(world, store)
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        StoredTargets(store, top_k=4, max_length=32, teacher_sha256=teacher_identity(load_teacher(world["t1"])))
    text = str(err.value)
    assert message.format(d=store) in text and "\n" not in text


def test_a_damaged_store_refuses_the_run_before_its_directory_is_made(world, tmp_path):
    """Through the command line, in a subprocess as a user meets it: exit 2, one line, no traceback, no RUN_DIR."""
    store = tmp_path / "store"
    shutil.copytree(world["s1"], store)
    shutil.copy(world["s2"] / SHARD1, store / SHARD1)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "maskplay", "distill", str(world["t1"]), "--data",
                           str(world["data"]), "--out", str(run), "--targets", str(store), "--top-k", "4",
                           "--max-steps", "1", "--set", "model.preset=tiny", "--set", "data.max_length=32",
                           "--set", "optim.warmup_steps=1", "--device", "cpu"], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "written for another teacher" in done.stderr
    assert not run.exists()


def _config(world: dict, out: Path, *overrides: str):
    return small_config(world["data"], out, "optim.max_steps=2", "optim.warmup_steps=1", "data.batch_size=8", *overrides)


def test_a_refused_start_leaves_nothing_that_refuses_the_corrected_one(world, tmp_path):
    run = tmp_path / "run"
    wrong = DistillConfig(teacher=str(world["t1"]), targets=str(world["s2"]), top_k=4, temperature=2.0)
    with pytest.raises(ValueError, match="prepared by another teacher"):
        distill(_config(world, run), wrong)
    assert not run.exists()
    # what was left by a refusal before: a run directory whose distill.json the corrected start had to match
    run.mkdir()
    (run / "distill.json").write_text(json.dumps(wrong.to_dict()))
    (run / "config.toml").write_text(_config(world, run).to_toml())
    right = DistillConfig(teacher=str(world["t1"]), targets=str(world["s1"]), top_k=4, temperature=1.0)
    assert distill(_config(world, run), right).status == "finished"


def test_a_store_of_other_data_is_refused_before_the_run(world, tmp_path):
    other = make_data(tmp_path / "other", n_train=40, n_valid=8, seed=5)
    run = tmp_path / "run"
    cfg = small_config(other, run, "optim.max_steps=2", "optim.warmup_steps=1", "data.batch_size=8")
    with pytest.raises(ValueError, match="prepare them from the run's --data"):
        distill(cfg, DistillConfig(teacher=str(world["t1"]), targets=str(world["s1"]), top_k=4))
    assert not run.exists()
    train_only = tmp_path / "train-only"
    prepare_targets(world["t1"], world["data"], train_only, top_k=4, max_length=32, splits=("train",))
    with pytest.raises(ValueError, match="hold no valid split"):
        distill(_config(world, run), DistillConfig(teacher=str(world["t1"]), targets=str(train_only), top_k=4))
    assert not run.exists()


def test_a_store_is_never_mixed_into_other_files(world, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli_main(["distill", "prepare", str(world["t1"]), "--data", str(world["data"]), "--out", str(out)]) == 2
    assert "holds other files (notes.txt) and no meta.json" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    (out / "notes.txt").unlink()
    (out / ".tmp-teacher-convert-1").mkdir()  # what a killed conversion leaves: no obstacle
    assert cli_main(["distill", "prepare", str(world["t1"]), "--data", str(world["data"]), "--out", str(out),
                     "--top-k", "4", "--max-length", "32"]) == 0


def test_prepare_refuses_an_empty_corpus_and_bad_splits(world, tmp_path, capsys):
    empty = tmp_path / "empty"
    shutil.copytree(world["data"], empty)
    shutil.rmtree(empty / "train")
    write_split(empty / "train", [], 100)
    assert cli_main(["distill", "prepare", str(world["t1"]), "--data", str(empty), "--out", str(tmp_path / "a")]) == 2
    assert "train holds no sequences" in capsys.readouterr().err and not (tmp_path / "a").exists()
    assert cli_main(["distill", "prepare", str(world["t1"]), "--data", str(world["data"]), "--out",
                     str(tmp_path / "b"), "--splits", "../../outside"]) == 2
    assert "a split is a subdirectory's name" in capsys.readouterr().err and not (tmp_path / "b").exists()
    assert cli_main(["distill", "prepare", str(world["t1"]), "--data", str(world["data"]), "--out",
                     str(tmp_path / "c"), "--splits", "test"]) == 2
    assert "has none of them" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--top-k must be a whole number >= 1, got 0"):
        prepare_targets(world["t1"], world["data"], tmp_path / "d", top_k=0)


@pytest.mark.parametrize("argv,named", [
    (["--temperature", "nan"], "--temperature"), (["--temperature", "inf"], "--temperature"),
    (["--temperature", "0"], "--temperature"), (["--top-k", "0"], "--top-k"), (["--top-k", "-3"], "--top-k"),
    (["--teacher-rows", "0"], "--teacher-rows"), (["--max-steps", "0"], "--max-steps"),
    (["--set", "optim.max_steps=-1"], "optim.max_steps"), (["--set", "run.max_minutes=0"], "run.max_minutes"),
    (["--set", "run.max_words=-5"], "run.max_words"), (["--set", "run.checkpoint_at_words=0"], "checkpoint_at_words"),
])
def test_settings_out_of_range_are_one_line_before_any_work(world, tmp_path, capsys, argv, named):
    run = tmp_path / "run"
    try:
        code = cli_main(["distill", str(world["t1"]), "--data", str(world["data"]), "--out", str(run),
                         "--max-steps", "2", "--set", "optim.warmup_steps=1", *argv])
    except SystemExit as exit_:  # argparse's refusal of an option's value
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and named in err and not run.exists()


# ---- HuggingFace teachers converted into the store ----------------------------------------------------------

def _hf(directory: Path, data: Path, kind: str, seed: int) -> Path:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    if kind == "bert":
        model = transformers.BertForMaskedLM(transformers.BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64))
    else:
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=3, eos_token_id=1))
    model.save_pretrained(directory, safe_serialization=True)
    load_tokenizer(data).save(directory)
    return directory


def _prepare(teacher: Path, data: Path, out: Path, *extra: str) -> int:
    return cli_main(["distill", "prepare", str(teacher), "--data", str(data), "--out", str(out), "--top-k", "4",
                     "--max-length", "32", *extra])


def test_a_refused_huggingface_teacher_leaves_no_conversion_behind(world, tmp_path, capsys):
    gpt2 = _hf(tmp_path / "gpt2", world["data"], "gpt2", 0)
    store = tmp_path / "store"
    assert _prepare(gpt2, world["data"], store) == 2
    err = capsys.readouterr().err
    assert f"teacher {gpt2}: a 'gpt' model has no masked-LM reading" in err and not store.exists()
    bert = _hf(tmp_path / "bert", world["data"], "bert", 0)
    assert _prepare(bert, world["data"], store) == 0  # the retry with a good teacher converts it
    meta = json.loads((store / "meta.json").read_text())
    assert meta["teacher"]["family"] == "bert"


def test_another_huggingface_teacher_is_never_given_the_old_ones_conversion(world, tmp_path, capsys):
    first, second = (_hf(tmp_path / name, world["data"], "bert", seed) for name, seed in (("b1", 0), ("b2", 1)))
    store = tmp_path / "store"
    # a conversion left without targets (refused after it: a top-k over its vocabulary of 100): the next teacher is
    # converted anew
    assert _prepare(first, world["data"], store, "--top-k", "1000") == 2
    assert "--top-k 1000 is more than the teacher's vocabulary of 100 ids" in capsys.readouterr().err
    assert (store / "teacher" / "config.json").is_file() and not (store / "meta.json").exists()
    capsys.readouterr()
    assert _prepare(second, world["data"], store) == 0
    converted = load_teacher(store / "teacher")
    own = tmp_path / "own"
    assert cli_main(["convert", "--from-hf", str(second), "--out", str(own)]) == 0
    assert teacher_identity(converted) == teacher_identity(load_teacher(own))
    assert json.loads((store / "meta.json").read_text())["teacher"]["weights_sha256"] == teacher_identity(converted)
    # with targets made, another teacher is refused, the store untouched
    before = sorted(p.name for p in store.iterdir())
    assert _prepare(first, world["data"], store) == 2
    assert "give a new --out for this teacher" in capsys.readouterr().err
    assert sorted(p.name for p in store.iterdir()) == before
    assert teacher_identity(load_teacher(store / "teacher")) == teacher_identity(converted)
    assert _prepare(second, world["data"], store) == 0  # the same teacher again: resumed, nothing converted


def test_a_refusal_that_needs_no_teacher_comes_before_its_conversion(world, tmp_path, capsys):
    """A HuggingFace teacher is converted into the store or run directory: what needs no teacher refuses first."""
    bert = _hf(tmp_path / "bert", world["data"], "bert", 0)
    store, run = tmp_path / "store", tmp_path / "run"
    capsys.readouterr()
    for extra, message in ((["--splits", "test"], "has none of them"), (["--splits", "../x"], "a split is a"),
                           (["--data", str(tmp_path / "nowhere")], "nowhere/train not found")):
        assert _prepare(bert, world["data"], store, *extra) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
        assert not store.exists()
    assert cli_main(["distill", str(bert), "--data", str(world["data"]), "--out", str(run), "--targets",
                     str(world["s1"]), "--set", "data.pack=true", "--max-steps", "2", "--set", "optim.warmup_steps=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data.pack" in err and not run.exists(), err


def test_a_top_k_over_the_vocabulary_is_refused_before_any_work(world, tmp_path, capsys):
    """Before, --top-k 1000 with a vocabulary of 100 was cut to 100 without a word."""
    vocab = load_teacher(world["t1"]).config.vocab_size
    message = f"--top-k 1000 is more than the teacher's vocabulary of {vocab} ids"
    assert cli_main(["distill", "prepare", str(world["t1"]), "--data", str(world["data"]), "--out",
                     str(tmp_path / "store"), "--top-k", "1000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not (tmp_path / "store").exists(), err
    run = tmp_path / "run"
    assert cli_main(["distill", str(world["t1"]), "--data", str(world["data"]), "--out", str(run), "--top-k", "1000",
                     "--max-steps", "2", "--set", "optim.warmup_steps=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"distill top_k 1000 is more than the teacher's vocabulary of {vocab}" in err, err
    assert not run.exists()
    with pytest.raises(ValueError, match=f"top_k {vocab + 1} is more than"):
        TeacherPass(load_teacher(world["t1"]), vocab + 1)
    assert TeacherPass(load_teacher(world["t1"]), vocab).top_k == vocab  # the whole vocabulary is fine


@pytest.mark.parametrize("damage,message", [
    (lambda d: (d / "offsets.npy").write_bytes(b"\x93NUMPY garbage" * 30), "offsets.npy is damaged"),
    (lambda d: (d / "offsets.npy").write_bytes(b""), "offsets.npy is damaged"),
    (lambda d: np.save(d / "offsets.npy", np.array([[0, 1]])), "offsets.npy is damaged: not the offsets"),
    (lambda d: np.save(d / "offsets.npy", np.array([0.0, 3.0])), "offsets.npy is damaged: not the offsets"),
    (lambda d: (d / "tokens.bin").write_bytes((d / "tokens.bin").read_bytes()[:-7]), "tokens.bin is damaged"),
    (lambda d: (d / "tokens.bin").unlink(), "tokens.bin is damaged: missing"),
])
def test_a_binary_or_damaged_prepared_split_is_one_line_before_any_work(world, tmp_path, capsys, damage, message):
    data = tmp_path / "data"
    shutil.copytree(world["data"], data)
    damage(data / "train")
    for argv in (["prepare", str(world["t1"]), "--data", str(data), "--out", str(tmp_path / "store")],
                 [str(world["t1"]), "--data", str(data), "--out", str(tmp_path / "run"), "--max-steps", "2",
                  "--set", "optim.warmup_steps=1", "--set", "data.max_length=32"]):
        assert cli_main(["distill", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "store").exists() and not (tmp_path / "run").exists()
