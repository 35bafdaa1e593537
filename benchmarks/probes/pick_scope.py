"""The scope a GPU run trains in (gpu_one_call.sh, step 1): of the scopes compile_time.py timed (eager, and compiled
block by block or whole), the one that trains the most steps in the seconds left, a compiled scope paying its
compile first (the training pays it again: compile_time.py compiled it once; with --warm-cache the training may
read some of it back from inductor's cache, not yet measured, so this is the cautious count). A scope whose timing
is missing (its case ran past the time limit, or failed) is not chosen; with nothing timed, eager at an unknown
speed.

Writes the speed file gpu_babylm.sh plans the words budget from (one row: the step time of the chosen scope) and
prints "SCOPE COMPILE_S" for the script.

    python benchmarks/probes/pick_scope.py compile.json gpt-bert 420 --flex 0 --speed-out train-speed.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def pick(rows: list[dict], left_s: float) -> tuple[str, float, dict | None]:
    """(scope, compile seconds to plan for, its row): the scope with the most steps in left_s; eager (its row, where
    it was timed) unless a compiled scope trains more, and some."""
    eager = next((r for r in rows if r["scope"] == "eager"), None)
    best: tuple[str, float, dict | None] = ("eager", 0.0, eager)
    best_steps = max(left_s, 0.0) * 1000 / float(eager["step_ms"]) if eager else 0.0
    for row in rows:
        if row["scope"] == "eager":
            continue
        compile_s = max(float(row["compile_s"]), 0.0)
        steps = (left_s - compile_s) * 1000 / float(row["step_ms"])
        if steps > best_steps:
            best, best_steps = (row["scope"], compile_s, row), steps
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("compile_json", help="compile_time.py's output (may be missing: then eager)")
    p.add_argument("family")
    p.add_argument("left_s", type=float, help="the seconds left for compiling and training")
    p.add_argument("--flex", type=int, choices=[0, 1], default=0, help="the steps were timed through FlexAttention")
    p.add_argument("--speed-out", required=True, help="the speed file for gpu_babylm.sh (SPEED_JSON)")
    args = p.parse_args()
    path = Path(args.compile_json)
    rows = [r for r in json.loads(path.read_text())["rows"] if r["family"] == args.family] if path.is_file() else []
    scope, compile_s, row = pick(rows, args.left_s)
    speed = {"rows": [{"case": f"babylm {args.family} recipe", "step_ms": row["step_ms"], "scope": scope,
                       "flex_attention": bool(args.flex)}] if row else []}
    Path(args.speed_out).write_text(json.dumps(speed, indent=2) + "\n")
    print(scope, round(compile_s))


if __name__ == "__main__":
    main()
