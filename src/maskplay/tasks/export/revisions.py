"""`maskplay export --to-hf RUN_DIR --revisions --out DIR`: a run's models by words seen (run.checkpoint_at_words
writes RUN_DIR/words/<N>, each with words.json) and its final model as ONE HuggingFace repository: DIR is a git
repository with a branch per checkpoint named as the BabyLM Challenge asks (`chck_1M` ... `chck_10M`, `chck_20M`
... `chck_100M`: "chck_" + the words/ directory's name) and `main` the final model, checked out. The commits run in
the order of words seen, so `git log main` is the run's history. transformers reads a local directory as it is
checked out (its `revision=` applies to the Hub only): `git -C DIR checkout chck_1M` before loading a checkpoint
locally, or upload each branch (`hf upload USER/NAME DIR --revision chck_1M`; docs/guides/babylm.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ...runtime.files import model_file, read_json_object, replace_directory
from ..train.export import words_name
from .hf import _check_out, _load, model_export, write_into
from .to_hf import SUBFOLDER, tower_exports, write_towers

WORDS_DIR, WORDS_INFO, FINAL_DIR = "words", "words.json", "final"  # train/export.py's layout of a run
MAIN = "main"
# the commits' author where the user's git has none configured (git refuses to commit without one)
IDENTITY = ("-c", "user.name=maskplay export", "-c", "user.email=export@maskplay.invalid")


def word_checkpoints(run_dir: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    """(branch, model directory, words.json) of each model of the run by words seen, fewest words first; a
    words/<N> directory without a readable words.json, or whose words.json does not say its words, is refused
    in one line naming it (a hidden entry, a write interrupted before its rename, is not a checkpoint)."""
    found = []
    for directory in sorted((run_dir / WORDS_DIR).glob("*")):
        if not directory.is_dir() or directory.name.startswith("."):
            continue
        if not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z_-]*", directory.name):
            raise ValueError(f"{directory}: chck_{directory.name} cannot be a branch name; words/ holds the "
                             "directories run.checkpoint_at_words names (1M, 500K, ...)")
        info = model_file(directory, WORDS_INFO)  # the model directory's own file, not a link out of it
        if not info.is_file():
            raise ValueError(f"{directory} has no {WORDS_INFO}: not a checkpoint by words seen "
                             "(run.checkpoint_at_words writes one in each); remove the directory or restore the file")
        data = read_json_object(info)
        words = data.get("checkpoint_at_words")
        if type(words) is not int or words <= 0:
            raise ValueError(f"{info} is damaged: checkpoint_at_words must be a positive whole number, "
                             f"not {words!r}")
        if _words_of(directory.name) != words:  # the branch is named for the directory: they must agree
            raise ValueError(f"{info} says checkpoint_at_words {words:,}, but its directory is {WORDS_DIR}/"
                             f"{directory.name}: a branch chck_{directory.name} would name the wrong count (the "
                             f"model at {words:,} words is written to {WORDS_DIR}/{words_name(words)})")
        step = data.get("step")
        if step is not None and (type(step) is not int or step < 0):
            raise ValueError(f"{info} is damaged: step must be a whole number >= 0, not {step!r}")
        found.append((f"chck_{directory.name}", directory, data))
    return sorted(found, key=lambda item: item[2]["checkpoint_at_words"])


def _words_of(name: str) -> int | None:
    """The words a words/ directory's name counts (train/export.py's words_name: 1M, 500K, 1500), None for a name
    that is no count."""
    found = re.fullmatch(r"([0-9]+)([KM]?)", name)
    return None if found is None else int(found[1]) * {"": 1, "K": 1000, "M": 1_000_000}[found[2]]


def _git(repo: Path, *args: str) -> str:
    identity = () if _configured(repo) else IDENTITY
    done = subprocess.run(["git", *identity, "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"git {' '.join(args)} in {repo} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def _configured(repo: Path) -> bool:
    done = subprocess.run(["git", "-C", str(repo), "config", "user.email"], capture_output=True, text=True)
    return done.returncode == 0 and bool(done.stdout.strip())


def _commit(repo: Path, source: Path, message: str, name: str, custom_code: bool, card: dict[str, Any]) -> str:
    """The export of `source` as the repository's whole tree (files of the commit before removed), committed."""
    for path in repo.iterdir():
        if path.name != ".git":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    source, model, tokenizer = _load(source)
    if model.parts:  # ELECTRA: the discriminator, and the generator in generator/ (to_hf.py)
        disc, gen = tower_exports(source, model, tokenizer, name, f"{name}/{SUBFOLDER}", custom_code, card)
        write_towers(repo, disc, gen)
        notes = disc[2]
    else:
        files, weights, notes = model_export(source, model, tokenizer, name, custom_code, card)
        write_into(repo, files, weights)
    _git(repo, "add", "--all")
    # two marks one step crossed hold the same model: an empty commit keeps a branch for each
    # the user's hooks and signing settings are for their own work, not for this generated repository
    _git(repo, "-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "--allow-empty", "--message", message)
    return notes[0]


def export_revisions(run_dir: str | Path, out: str | Path, custom_code: bool = False, license: str = "other",
                     datasets: list[str] | None = None) -> list[str]:
    """Write the repository of the run `run_dir` (final/ and words/<N>/) to `out`; returns what to tell the user."""
    run_dir, out = Path(run_dir), Path(out)
    _check_out(out)
    if not (run_dir / FINAL_DIR).is_dir():
        raise FileNotFoundError(f"{run_dir} has no {FINAL_DIR}/: --revisions takes a run directory (RUN_DIR of "
                                "maskplay pretrain) whose run has finished")
    checkpoints = word_checkpoints(run_dir)
    if not checkpoints:
        raise FileNotFoundError(f"{run_dir} has no {WORDS_DIR}/<N>/{WORDS_INFO}: train with run.checkpoint_at_words "
                                "to save models by words seen")
    if shutil.which("git") is None:
        raise FileNotFoundError("--revisions writes a git repository, and git is not on PATH")
    card = {"license": license, "datasets": datasets}
    what: list[str] = []

    def write(tmp: Path) -> None:
        tmp.mkdir(parents=True)
        _git(tmp, "init", "--quiet", "--initial-branch", MAIN)
        for branch, directory, info in checkpoints:
            words = info["checkpoint_at_words"]
            _commit(tmp, directory, f"{branch}: the model at {words:,} words seen (step {info.get('step')})",
                    out.name, custom_code, card)
            _git(tmp, "branch", branch)
        what.append(_commit(tmp, run_dir / FINAL_DIR, "main: the final model", out.name, custom_code, card))

    replace_directory(out, write)
    branches = " ".join(branch for branch, _, _ in checkpoints)
    return [f"wrote {out}: a git repository of {what[0]}, branch main the final model and a branch per checkpoint "
            f"by words seen: {branches}",
            f"to load a checkpoint from the directory: git -C {out} checkout BRANCH (transformers ignores revision= "
            "for a local directory); to the Hub: for each branch, check it out and "
            f"`hf upload USER/NAME {out} --revision BRANCH` (docs/guides/babylm.md)"]
