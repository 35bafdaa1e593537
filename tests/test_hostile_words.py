"""Words budgets and corpora under hostile or careless input: run.max_words and run.checkpoint_at_words of the
wrong type, negative, unsorted, duplicated or beyond the budget (from a TOML file and from --set); a BabyLM folder
without training files; a binary or empty corpus. Each is one line at the command line, exit 2, before any work,
and leaves nothing behind."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maskplay.cli import main
from maskplay.config import apply_overrides
from maskplay.tasks.train.config import load_train_config
from tests.tasks.train.test_train import make_data

REPO = Path(__file__).resolve().parents[1]
TOKENIZER = REPO / "src" / "maskplay" / "assets" / "tta-mini-wiki" / "tokenizer.json"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("words-data"), n_train=16, n_valid=4)


def _pretrain(data: Path, out: Path, *argv: str) -> list[str]:
    return ["pretrain", "--family", "gpt", "--data", str(data), "--out", str(out), "--set", "model.preset=tiny",
            "--set", "optim.max_steps=2", "--set", "optim.warmup_steps=1", *argv]


@pytest.mark.parametrize("toml,message", [
    ('max_words = "10M"', "max_words = '10M': expected an integer, got str"),
    ("max_words = 1.5e6", "max_words = 1500000.0: expected an integer, got float"),
    ("max_words = true", "max_words = True: expected an integer"),
    ("max_words = -5", "run.max_words must be at least 1"),
    ("max_words = 0", "run.max_words must be at least 1"),
    ("max_words = [100]", "expected an integer"),
    ("checkpoint_at_words = 1000", "checkpoint_at_words = 1000: expected a list of integers"),
    ('checkpoint_at_words = [1000, "2M"]', "checkpoint_at_words = '2M': expected an integer, got str"),
    ("checkpoint_at_words = [1.5]", "expected an integer, got float"),
    ("checkpoint_at_words = [true]", "expected an integer"),
    ("checkpoint_at_words = [-10, 20]", "must be increasing positive word counts, got [-10, 20]"),
    ("checkpoint_at_words = [0]", "must be increasing positive word counts"),
    ("checkpoint_at_words = [30, 20]", "must be increasing positive word counts, got [30, 20]"),
    ("checkpoint_at_words = [20, 20]", "must be increasing positive word counts, got [20, 20]"),
    ("max_words = 50\ncheckpoint_at_words = [10, 60, 100]", "run.checkpoint_at_words 60, 100 lie beyond "
                                                             "run.max_words=50"),
])
def test_a_words_budget_from_a_config_file_is_checked_in_one_line(data, tmp_path, capsys, toml, message):
    config = tmp_path / "run.toml"
    config.write_text(f"[run]\n{toml}\n")
    assert main(_pretrain(data, tmp_path / "run", "--config", str(config))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides,message", [
    (["run.max_words=ten"], "override run.max_words='ten': expected int"),
    (["run.max_words=-1"], "run.max_words must be at least 1"),
    (["run.checkpoint_at_words=[3,2]"], "must be increasing positive word counts"),
    (["run.checkpoint_at_words=[a]"], "expected int"),
    (["run.max_words=100", "run.checkpoint_at_words=[50,200]"], "run.checkpoint_at_words 200 lie beyond"),
])
def test_a_words_budget_from_set_is_checked_in_one_line(data, tmp_path, capsys, overrides, message):
    argv = [item for o in overrides for item in ("--set", o)]
    assert main(_pretrain(data, tmp_path / "run", *argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "run").exists()


def test_overrides_may_pass_through_an_inconsistent_budget_on_their_way(data, tmp_path):
    """A config's 100M budget with marks to 100M, overridden to 10M and marks to 10M: each override alone would
    put a mark beyond the budget; only the final config is checked."""
    config = tmp_path / "run.toml"
    config.write_text("[run]\nmax_words = 100_000_000\ncheckpoint_at_words = [1_000_000, 100_000_000]\n")
    merged = apply_overrides(load_train_config(config), ["run.max_words=10000000",
                                                         "run.checkpoint_at_words=[1000000,10000000]"]).validate()
    assert merged.run.max_words == 10_000_000 and merged.run.checkpoint_at_words == [1_000_000, 10_000_000]


# ---- corpora ----------------------------------------------------------------------------------------------------

def _prepare(corpus: Path, out: Path, *extra: str) -> list[str]:
    return ["prepare", "--corpus", str(corpus), "--tokenizer", str(TOKENIZER), "--out", str(out), "--quiet", *extra]


def test_a_babylm_folder_without_training_files_is_one_line(tmp_path, capsys):
    root = tmp_path / "babylm"
    for folder, name in (("dev", "childes.dev"), ("test", "childes.test")):
        (root / folder).mkdir(parents=True)
        (root / folder / name).write_text("the cat sat .\nshe said hi .\n")
    (root / "dev" / "bnc.dev.gz").write_bytes(gzip.compress(b"hello there .\n"))
    for where in (root, root / "dev"):
        assert main(_prepare(where, tmp_path / "out")) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "held-out files" in err and "no training files (*.train)" in err
        assert not (tmp_path / "out").exists()
    (root / "train_10M").mkdir()
    (root / "train_10M" / "childes.train").write_text("the dog ran .\n" * 40)
    assert main(_prepare(root, tmp_path / "out")) == 0  # with its training files, they alone


@pytest.mark.parametrize("content,extra,message", [
    (b"\x89PNG\r\n\x1a\n" + bytes(range(1, 256)) * 40, (), "invalid UTF-8"),
    (b"text\x00\x01\x02 more" * 100, ("--on-invalid-utf8", "replace"), "NUL"),
    (b"", (), "gives no training sequence: no text in it"),
    (b"\n  \n\t\n", (), "gives no training sequence: no text in it"),
])
def test_a_binary_or_empty_training_file_is_one_line_and_leaves_nothing(tmp_path, capsys, content, extra, message):
    root = tmp_path / "babylm" / "train_10M"
    root.mkdir(parents=True)
    (root / "bnc_spoken.train").write_bytes(content)
    out = tmp_path / "out"
    assert main(_prepare(root.parent, out, *extra)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()  # no .partial directory left behind either


def test_a_refused_corpus_through_the_cli_is_no_traceback(tmp_path):
    root = tmp_path / "babylm" / "dev"
    root.mkdir(parents=True)
    (root / "a.dev").write_text("hello .\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "maskplay", *_prepare(root.parent, tmp_path / "out")],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
