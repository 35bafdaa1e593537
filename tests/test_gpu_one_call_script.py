"""benchmarks/gpu_one_call.sh on the CPU at 1/1000 scale: the profile (both disentangled-bias kernels), the eager
step timed, one family trained to its words budget and scored, GPT-2 small's case, all packed into one archive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.test_gpu_babylm_script import tiny_world

REPO = Path(__file__).resolve().parents[1]


def dry_run_env(tmp_path: Path) -> dict[str, str]:
    """The script on this CPU at 1/1000 scale: a tiny corpus, model and BLiMP, a 3,000-word budget."""
    return {**os.environ, **tiny_world(tmp_path), "WORK": str(tmp_path / "work"), "DEVICE": "cpu",
            "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "DEADLINE": "240", "BABYLM_WORDS": "3000",
            "MARK_SCALE": "0.001", "NUM_WORKERS": "0",
            "BABYLM_SET": "model.preset=tiny data.max_length=32 data.batch_size=8 run.threads=1 run.precision=fp32 "
                          "run.eval_batches=1",
            "PROFILE_ARGS": "--tiny --batch 2 --seq-len 32 --steps 1 --timed 1 --warmup 1",
            # eager only: compiling the whole step takes a CPU minutes (tests/test_pick_scope.py holds the choice)
            "COMPILE_SCOPES": "eager",
            "COMPILE_ARGS": "--tiny --batch 2 --seq-len 32 --steps 1", "GPT2_ARGS": "--tiny --warmup 1 --steps 1",
            "SWITCH_ARGS": "--tiny --batch 2 --seq-len 32 --steps 1 --warmup 1 --pieces DenseFormer plain"}


@pytest.mark.slow
@pytest.mark.heavy
def test_gpu_one_call_script_dry_run_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_one_call.sh")], cwd=REPO,
                            env={**dry_run_env(tmp_path), "OUT": str(out)}, capture_output=True, text=True, timeout=300)
    log = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, log
    assert [p.name for p in out.iterdir()] == ["results.tgz"], log  # one file to copy back from a remote machine
    with tarfile.open(out / "results.tgz") as tar:
        files = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    profile = json.loads(files["profile.json"])
    assert [(r["family"], r["bias"]) for r in profile["rows"]] == [("gpt-bert", "gather"), ("gpt-bert", "one-hot")]
    assert all(r["step_ms"] > 0 and r["top"] for r in profile["rows"])
    switches = json.loads(files["switch-cost.json"])["rows"]  # the recipe, each chosen piece out, the recipe again
    assert [r["variant"] for r in switches] == ["recipe", "no DenseFormer (plain residual)", "plain (every piece out)",
                                                "recipe (again)"]
    assert all(r["step_ms"] > 0 for r in switches) and switches[-1]["vs_recipe"] == 1.0
    assert [(r["scope"], r["flex_attention"]) for r in json.loads(files["train-speed.json"])["rows"]] == [
        ("eager", False)]
    summary = json.loads(files["babylm.json"])
    (family,) = summary["families"]
    assert family["family"] == "gpt-bert" and family["words_seen"] >= 3000, family
    assert 0 <= family["blimp_dev_macro"] <= 100 and family["blimp_method"] == "causal"
    assert 0 <= family["blimp_dev_by_method"]["pll"] <= 100  # and scored as BabyLM's mntp backend reads it
    assert 0 <= family["blimp_dev_raw"] <= 100  # final is the weights' moving average; final-raw scored too
    assert {r["case"] for r in json.loads(files["gpt2-small.json"])["rows"]} >= {"gpt2-small gpt"}
    assert "metrics-gpt-bert.jsonl" in files
    assert str(tmp_path).encode() not in files["babylm.json"]  # no machine paths


@pytest.mark.slow
@pytest.mark.heavy
def test_one_run_over_two_commands_resumes_and_finishes(tmp_path):
    """PART=1 trains to its stop step and checkpoints, scoring nothing; PART=2, on the same $WORK, resumes that run,
    reaches the words budget and scores it: the two parts' steps add up to one run's."""
    base = {**dry_run_env(tmp_path), "PROFILE": "0", "SWITCHES": "0", "PACK": "0", "BLIMP_METHODS": "", "GPT2": "0"}
    runs = {}
    # a profile that timed FlexAttention faster: part 1 tries it, but its GPU test is skipped on a CPU, so SDPA with
    # the gathered bias trains, and part 2 keeps part 1's choice
    (tmp_path / "out1").mkdir()
    (tmp_path / "out1" / "profile.json").write_text(json.dumps({"rows": [{"bias": "gather", "step_ms": 100.0},
                                                                         {"bias": "flex", "step_ms": 50.0}]}))
    for part, extra in (("1", {"PART_STEPS": "7"}), ("2", {})):
        out = tmp_path / f"out{part}"
        result = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_one_call.sh")], cwd=REPO,
                                env={**base, **extra, "OUT": str(out), "PART": part}, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        runs[part] = (json.loads((out / "babylm.json").read_text())["families"][0], result.stdout)
    (first, log1), (second, log2) = runs["1"], runs["2"]
    assert first["steps"] == 7 and "blimp_dev_macro" not in first, log1  # stopped at its step, nothing scored
    assert "part 2 of 2: from step 7" in log2
    assert "flex GPU test: " in log1 and "flex attention: 0" in log1, log1
    assert "flex GPU test: " not in log2 and "flex attention: 0" in log2, log2
    plan = json.loads((tmp_path / "out2" / "babylm.json").read_text())["plan"]["plans"][0]
    assert second["steps"] == plan["max_steps"] > 7 and second["words_seen"] >= 3000, log2
    assert "reached run.max_words=3,000" in second["ended"] and 0 <= second["blimp_dev_macro"] <= 100
    assert "resum" in (tmp_path / "out2" / "train-gpt-bert.log").read_text().lower()


def test_diagnostics_alone_then_training_reads_their_choice(tmp_path):
    """TRAIN=0 stops after the diagnostics (here only the FlexAttention choice: a profile that timed it faster, its
    GPU test skipped on a CPU, so 0), packing what it has; a later command that profiles nothing reads that choice."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "profile.json").write_text(json.dumps({"rows": [{"bias": "gather", "step_ms": 100.0},
                                                           {"bias": "flex", "step_ms": 50.0}]}))
    env = {**dry_run_env(tmp_path), "OUT": str(out), "PROFILE": "0", "SWITCHES": "0", "TRAIN": "0"}
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_one_call.sh")], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "diagnostics done" in result.stdout, result.stdout[-2000:] + result.stderr
    assert "flex GPU test: " in result.stdout and (tmp_path / "work" / "flex.txt").read_text().strip() == "0"
    assert [p.name for p in out.iterdir()] == ["results.tgz"] and not (tmp_path / "work" / "gpt-bert").exists()
    (tmp_path / "work" / "flex.txt").write_text("1\n")  # as a GPU's diagnostics would leave it
    again = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_one_call.sh")], cwd=REPO,
                           env={**env, "OUT": str(tmp_path / "out2")}, capture_output=True, text=True, timeout=120)
    assert "flex attention: 1" in again.stdout and "flex GPU test: " not in again.stdout, again.stdout[-2000:]
