"""benchmarks/gpu_stage.sh in a throwaway git repository: `in` takes the weights out of the index and copies the data
within its budget, `out` leaves the repository as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_stage.sh"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "benchmarks")
    for name in ("tta", "gpt"):
        (repo / "src/maskplay/assets" / name).mkdir(parents=True)
        (repo / "src/maskplay/assets" / name / "model.safetensors").write_bytes(b"w" * 4096)
        (repo / "src/maskplay/assets" / name / "config.json").write_text("{}")
    (repo / ".gitignore").write_text("/shared/\n/.whl/\n")
    (repo / ".whl").mkdir()
    (repo / ".whl" / "litgpt.whl").write_bytes(b"x" * 1000)
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    data = tmp_path / "shared" / "data"
    for folder in ("enwiki-wikiextractor", "blimp-dev", "gutenberg-subset"):
        (data / folder).mkdir(parents=True)
    (data / "enwiki-wikiextractor" / "wiki_00").write_text("text")
    (data / "blimp-dev" / "a.jsonl").write_text("{}")
    for k in range(5):
        (data / "gutenberg-subset" / f"{k}.txt.gz").write_bytes(b"g" * 400_000)
    return repo


def _stage(repo: Path, what: str, **env: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo.parent), "SHARED": str(repo.parent / "shared" / "data"), **env}
    return subprocess.run(["bash", "benchmarks/gpu_stage.sh", what], cwd=repo, capture_output=True, text=True, env=env)


def test_in_stages_the_data_within_its_budget_and_out_restores_the_tree(repo):
    before = _git(repo, "ls-files")
    staged = _stage(repo, "in", GUTENBERG_MB="1")
    assert staged.returncode == 0, staged.stderr
    assert "model.safetensors" not in _git(repo, "ls-files")
    assert sorted(p.name for p in (repo / "shared/data").iterdir()) == ["blimp-dev", "enwiki-wikiextractor",
                                                                      "gutenberg-subset"]
    assert len(list((repo / "shared/data/gutenberg-subset").iterdir())) == 2  # 2 x 400 kB within 1 MiB, not 3
    assert "staged: 2 Gutenberg books" in staged.stdout
    assert _stage(repo, "in").returncode == 2  # staged twice: refused
    out = _stage(repo, "out")
    assert out.returncode == 0, out.stderr
    assert _git(repo, "ls-files") == before and _git(repo, "status", "--short") == ""
    assert not (repo / "shared").exists()
    assert "gpu_stage.sh" not in (repo / ".git/info/exclude").read_text()


def test_in_refuses_a_call_over_the_limit_and_out_still_undoes_it(repo):
    staged = _stage(repo, "in", GUTENBERG_MB="2", LIMIT_MB="1")
    assert staged.returncode == 1 and "over the limit" in staged.stderr
    assert _stage(repo, "out").returncode == 0
    assert _git(repo, "status", "--short") == ""
