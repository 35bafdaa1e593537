"""The package as a user gets it: `python -m build` builds the sdist and the wheel, `twine check` passes them, the
wheel carries the three mini models, the recipes and the manifests but not the models fetched on first use, and,
installed into a clean virtual environment (none of this checkout's files on its path), it runs from a directory
outside the repository: score with a bundled model, `models list`, `pretrain --config <a shipped recipe name>`
for a few steps, `export --to-hf` of that run, and the one-line errors for a model to fetch and data to fetch
while offline.

The clean environment is a new venv (no system site-packages) with torch installed first, this environment's build
(a +cpu or +cuXXX build from PyTorch's index for it where that can be reached, else from the package index), then
the wheel, pip resolving its declared dependencies from the package index: a dependency missing from
pyproject.toml fails here, `import maskplay` can only find the wheel, and `import transformers` (an extra's) fails.
Making it takes about 50 s on 2 cores with pip's cache warm (the whole file about 75 s); it needs the package index."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

pytestmark = [pytest.mark.heavy, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 900
TORCH_INDEX = "https://download.pytorch.org/whl/{}"  # PyTorch's index of one build (cpu, cu126, ...; Makefile)


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if check:
        assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _copy_checkout(target: Path) -> Path:
    """The checkout's files (tracked, and untracked but not ignored) copied, links as links: the build writes its
    build/ and egg-info there, never into the checkout others run tests from."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src, dst = REPO / name, target / name
        if not src.exists() and not src.is_symlink():  # deleted in the work tree, not yet in the index
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    return target


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    pytest.importorskip("build", reason="python -m build: pip install 'maskplay[test]'")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to know the package's files")
    root = tmp_path_factory.mktemp("package")
    source = _copy_checkout(root / "source")
    # --no-isolation: this environment's setuptools (no download); CI's `.ci/run` builds isolated as well (`make dist`)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(root / "dist"), str(source)], cwd=root)
    return root / "dist"


def test_build_and_twine_check(dist):
    pytest.importorskip("twine", reason="twine check: pip install 'maskplay[test]'")
    files = sorted(dist.iterdir())
    assert [f.name for f in files] == ["maskplay-0.2.0-py3-none-any.whl", "maskplay-0.2.0.tar.gz"]
    result = _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)], cwd=dist)
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_the_wheel_carries_the_mini_models_the_recipes_and_the_manifests(dist):
    wheel = dist / "maskplay-0.2.0-py3-none-any.whl"
    assert wheel.stat().st_size < 50 * 2**20  # three models: room for more under the index's 100 MB a file
    names = set(zipfile.ZipFile(wheel).namelist())
    for model in ("tta-mini-wiki", "gpt-mini-wiki", "unilm-titles-mini"):
        assert f"maskplay/assets/{model}/model.safetensors" in names
    assert not [n for n in names if n.startswith("maskplay/assets/") and "two-hour" in n]
    assert {"maskplay/assets/models.json", "maskplay/tasks/eval/datasets.json", "maskplay/configs/mini-tta.toml",
            "maskplay/configs/ttq/hour-tta.toml"} <= names
    metadata = zipfile.ZipFile(wheel).read("maskplay-0.2.0.dist-info/METADATA").decode()
    for family in ("T-TA", "BERT", "GPT", "UniLM", "XLNet", "ELECTRA", "GPT-BERT"):
        assert family in metadata.split("Summary:")[1].splitlines()[0]
    extras = {line.split(": ")[1] for line in metadata.splitlines() if line.startswith("Provides-Extra:")}
    assert extras == {"serve", "lm-eval", "hf", "docs", "test"}
    # the test suite regenerates and checks the docs (tests/test_docs.py, the page's screenshot): test holds docs
    wanted = {extra: {line.split(": ", 1)[1].split(";")[0].strip() for line in metadata.splitlines()
                      if line.startswith("Requires-Dist:") and f'extra == "{extra}"' in line} for extra in ("docs", "test")}
    assert wanted["docs"] and wanted["docs"] - {"matplotlib"} <= wanted["test"], wanted
    serve = [line for line in metadata.splitlines() if "extra == \"serve\"" in line]
    assert serve and not any(tool in line for line in serve for tool in ("playwright", "httpx", "openai", "pytest"))


def _install_torch(pip: list[str], root: Path, env: dict[str, str]) -> None:
    """This environment's torch into the clean venv: its build's own index first (2.13.0+cpu: PyTorch's CPU index,
    not a CUDA build's GBs), the package index where that cannot be reached."""
    wanted = f"torch=={version('torch')}"
    build = version("torch").partition("+")[2]
    if build and _run([*pip, "install", "-q", "--retries", "0", "--timeout", "10", "--index-url",
                       TORCH_INDEX.format(build), wanted], cwd=root, env=env, check=False).returncode == 0:
        return
    _run([*pip, "install", "-q", wanted], cwd=root, env=env)


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    root = tmp_path_factory.mktemp("installed")
    venv = root / "venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MASKPLAY_DATA", "MASKPLAY_MODELS_URL")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root, env=env)  # with pip, without system site-packages
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip"]
    _install_torch(pip, root, env)
    # the wheel: its declared dependencies from the package index (torch==the one above satisfies torch>=2.4)
    _run([*pip, "install", "-q", str(dist / "maskplay-0.2.0-py3-none-any.whl")], cwd=root, env=env)
    _run([*pip, "check"], cwd=root, env=env)
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=root, env=env).stdout.strip())
    env.update(MASKPLAY_CACHE=str(root / "cache"), MASKPLAY_OFFLINE="1", HF_HUB_OFFLINE="1")
    work = root / "user" / "work"  # outside the repository; no ../shared/data beside it
    work.mkdir(parents=True)
    where = _run([str(python), "-c", "import maskplay; print(maskplay.__file__)"], cwd=work, env=env).stdout.strip()
    assert Path(where).is_relative_to(site), f"maskplay imported from {where}, not the wheel's {site}"
    torch = _run([str(python), "-c", "import torch; print(torch.__version__)"], cwd=work, env=env).stdout.strip()
    assert torch == version("torch"), f"the clean venv has torch {torch}, this environment {version('torch')}"
    blocked = _run([str(python), "-c", "import transformers"], cwd=work, env=env, check=False)
    assert blocked.returncode == 1 and "No module named 'transformers'" in blocked.stderr
    return venv, env, work


def test_score_and_models_list_from_outside_the_repository(installed):
    venv, env, work = installed
    maskplay = str(venv / "bin" / "maskplay")
    out = _run([maskplay, "score", "tta-mini-wiki", "The cat sat on the mat."], cwd=work, env=env).stdout
    assert "The cat sat on the mat." in out and "log p" in out
    rows = {line.split()[0]: line for line in _run([maskplay, "models", "list"], cwd=work, env=env).stdout.splitlines()}
    assert "bundled" in rows["tta-mini-wiki"] and str(venv) in rows["tta-mini-wiki"]
    assert rows["gpt-two-hour"].endswith("to fetch") and rows["tta-two-hour-gutenberg"].endswith("to fetch")


def test_what_is_not_installed_is_one_line_naming_the_command_that_gets_it(installed):
    venv, env, work = installed
    maskplay = str(venv / "bin" / "maskplay")
    model = _run([maskplay, "score", "gpt-two-hour", "a sentence"], cwd=work, env=env, check=False)
    assert model.returncode == 2 and "`maskplay models fetch gpt-two-hour`" in model.stderr
    assert len(model.stderr.strip().splitlines()) == 1, model.stderr
    data = _run([maskplay, "eval", "blimp", "gpt-mini-wiki"], cwd=work, env=env, check=False)
    assert data.returncode == 2 and "`maskplay data fetch blimp`" in data.stderr, data.stderr
    searched = f"(searched {work.parent / 'shared' / 'data'}, {Path(env['MASKPLAY_CACHE']) / 'data'})"
    assert searched in data.stderr, data.stderr


def test_pretrain_a_shipped_recipe_by_name_then_export_it(installed):
    venv, env, work = installed
    maskplay = str(venv / "bin" / "maskplay")
    words = "the cat sat on a mat dog ran in park river flows into sea near old town people live there".split()
    lines = [" ".join(words[(7 * i + 3 * j) % len(words)] for j in range(5 + i % 9)) + " ." for i in range(300)]
    (work / "corpus.txt").write_text("\n".join(lines) + "\n")
    small = ["data.max_length=32", "run.eval_every=2", "run.eval_batches=1",
             "run.save_every=2", "run.progress=false", "run.tensorboard=false", "run.threads=1", "run.device=cpu"]
    args = [maskplay, "pretrain", "--config", "mini-tta", "--corpus", "corpus.txt", "--tokenizer", "tta-mini-wiki",
            "--out", "run", "--max-steps", "2", "--batch-size", "4"]
    for override in small:
        args += ["--set", override]
    result = _run(args, cwd=work, env=env)
    assert "final model:" in result.stdout and (work / "run" / "final" / "model.safetensors").is_file()
    # the recipe's warmup (700 of 7,000 steps) follows --max-steps
    assert "optim.warmup_steps=700 does not fit optim.max_steps=2: scaled with the steps to 1" in result.stderr
    _run([maskplay, "export", "--to-hf", "run/final", "--out", "hf"], cwd=work, env=env)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (work / "hf").iterdir()}
