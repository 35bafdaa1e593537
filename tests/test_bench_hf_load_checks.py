"""benchmarks/hf_load_checks.py on a model small enough to be written whole (one model.safetensors, no sharded
index): it times the load with and without the checks as it does for a sharded one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]


def test_an_unsharded_model_is_measured(tmp_path):
    out = tmp_path / "checks.json"
    done = subprocess.run([sys.executable, "benchmarks/hf_load_checks.py", "--hidden", "64", "--layers", "1",
                           "--rounds", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["shards"] == 1 and result["hidden"] == 64
    assert set(result["median_s"]) == {"with checks", "without checks"}
    assert result["checks_alone_s"] > 0 and result["sizes_check_alone_s"] > 0
