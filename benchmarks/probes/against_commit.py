"""Is a change slower? Run a benchmark of this tree and of another checkout (a `git worktree` of the commit before
the change) alternately, several times, and compare their ratios against HuggingFace: each run measures its own
ratio in one invocation (maskplay and HuggingFace interleaved), so a ratio is comparable across the two trees
where raw tokens/s drift with the machine's load.

    git worktree add --detach ../before <commit>
    python benchmarks/probes/against_commit.py --base ../before --repeats 2 -- \
        benchmarks/train_speed.py --preset mini --data none --rounds 3
    python benchmarks/probes/against_commit.py --base ../before --repeats 2 -- \
        benchmarks/score_speed.py --sentences 100 --rounds 3 --dtype bf16
    python benchmarks/probes/against_commit.py --base ../before --repeats 5 -- \
        benchmarks/generate_speed.py --preset mini --threads 1 --rounds 3 --batch-sizes 1 8 --no-uncached

Prints, per case, the median ratio of each tree and new / base; writes --out as JSON when given."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
RATIO_KEYS = ("ratio_vs_hf_best", "speed_up_vs_best", "speedup_vs_best_hf")  # train_speed, score_speed, generate_speed


def run_once(tree: Path, script: list[str]) -> dict[str, float]:
    """One run of the benchmark with `tree`'s package (its src/ first on the path); case -> ratio vs HF."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        subprocess.run([sys.executable, str(tree / script[0]), *script[1:], "--out", str(out)], env=env, cwd=tree,
                       check=True, stdout=subprocess.DEVNULL)
        rows = json.loads(out.read_text())["rows"]
    key = next(k for k in RATIO_KEYS if k in rows[0])
    return {case_name(row): row[key] for row in rows}


def case_name(row: dict) -> str:
    """generate_speed.py repeats its cases for each batch size and prompt length: those go into the name."""
    if "batch" in row:
        return f"b{row['batch']} p{row['prompt_length']} {row['case']}"
    return row["case"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, type=Path, help="a checkout of the commit to compare against")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each tree, alternating (default 2)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- benchmarks/X.py and its arguments")
    args = parser.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script:
        parser.error("give the benchmark after --, e.g. -- benchmarks/train_speed.py --preset mini")
    runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    for k in range(args.repeats):
        for name, tree in (("base", args.base.resolve()), ("new", HERE)):
            print(f"run {k + 1}/{args.repeats}: {name}", file=sys.stderr, flush=True)
            runs[name].append(run_once(tree, script))
    cases = [c for c in runs["new"][0] if all(c in r for r in runs["base"])]
    table = []
    print(f"{'case':<44} {'base':>8} {'new':>8} {'new/base':>9}  {'base range':>13} {'new range':>13}"
          f"   (medians of {args.repeats} runs a tree)")
    for case in cases:
        base_runs, new_runs = [r[case] for r in runs["base"]], [r[case] for r in runs["new"]]
        base, new = statistics.median(base_runs), statistics.median(new_runs)
        table.append({"case": case, "base": base, "new": new, "new_over_base": new / base,
                      "base_range": [min(base_runs), max(base_runs)], "new_range": [min(new_runs), max(new_runs)]})
        print(f"{case:<44} {base:>7.2f}x {new:>7.2f}x {new / base:>8.3f}  "
              f"{min(base_runs):>5.2f}-{max(base_runs):<5.2f}x {min(new_runs):>5.2f}-{max(new_runs):<5.2f}x")
    if args.out is not None:
        args.out.write_text(json.dumps({"script": script, "repeats": args.repeats, "runs": runs, "table": table},
                                       indent=2) + "\n")


if __name__ == "__main__":
    main()
