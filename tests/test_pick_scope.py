"""benchmarks/probes/pick_scope.py: the scope gpu_one_call.sh trains in is the one that trains the most steps in the time
left, a compiled scope paying its compile first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks" / "probes"))
from pick_scope import pick  # noqa: E402

EAGER = {"family": "gpt-bert", "scope": "eager", "step_ms": 110.0, "compile_s": 0.4}
STEP = {"family": "gpt-bert", "scope": "step", "step_ms": 55.0, "compile_s": 60.0}
LAYERS = {"family": "gpt-bert", "scope": "layers", "step_ms": 111.0, "compile_s": 16.0}


def test_a_compile_is_chosen_where_its_faster_steps_repay_it():
    assert pick([EAGER, STEP, LAYERS], 400)[:2] == ("step", 60.0)  # 6,182 steps against eager's 3,636
    assert pick([EAGER, STEP, LAYERS], 100)[:2] == ("eager", 0.0)  # 727 against 727: eager first, and no compile
    assert pick([EAGER, STEP, LAYERS], 80)[:2] == ("eager", 0.0)   # 364 against 727
    assert pick([EAGER, LAYERS], 500)[0] == "eager"                 # slower and compiling: never
    assert pick([STEP], 100)[0] == "step"                           # the only one timed (eager failed)
    assert pick([STEP], 30) == ("eager", 0.0, None)                 # ... and its compile takes all the time left
    assert pick([], 400) == ("eager", 0.0, None)
    assert pick([EAGER, STEP], -5) == ("eager", 0.0, EAGER)           # no time left: eager, as timed


def run(tmp_path: Path, rows: list[dict] | None, left: str = "400", flex: str = "0") -> tuple[str, dict]:
    compile_json = tmp_path / "compile.json"
    if rows is not None:
        compile_json.write_text(json.dumps({"rows": rows}))
    speed = tmp_path / "train-speed.json"
    script = REPO / "benchmarks" / "probes" / "pick_scope.py"
    out = subprocess.run([sys.executable, str(script), str(compile_json), "gpt-bert",
                          left, "--flex", flex, "--speed-out", str(speed)], capture_output=True, text=True, check=True)
    return out.stdout.strip(), json.loads(speed.read_text())


def test_the_script_writes_the_chosen_speed_for_the_words_plan(tmp_path):
    other = {**STEP, "family": "tta", "step_ms": 1.0}  # another family's rows are not this run's
    printed, speed = run(tmp_path, [EAGER, STEP, other], flex="1")
    assert printed == "step 60"
    assert speed["rows"] == [{"case": "babylm gpt-bert recipe", "step_ms": 55.0, "scope": "step",
                              "flex_attention": True}]
    (tmp_path / "none").mkdir()
    printed, speed = run(tmp_path / "none", None)  # compile_time.py wrote nothing (it failed or ran out of time)
    assert printed == "eager 0" and speed["rows"] == []
