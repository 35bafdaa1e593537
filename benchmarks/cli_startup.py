"""How fast the `maskplay` command answers: whole processes timed, hyperfine-style (warm-up runs, then repeated
runs; the wall time's median, min, max and spread, and the median CPU time), for `maskplay --version`, `--help`
and scoring one sentence with a bundled model. With --base SRC, the same commands of another source tree (e.g. an
older commit's src/, from `git archive COMMIT src | tar -x -C DIR`) run in the same invocation, alternating with
this tree's, so that both see the same machine load; the JSON gives each tree's numbers and base / this ratios.

    python benchmarks/cli_startup.py --base ../base/src --base-name 02e57e0 --runs 10

Each process runs the tree's package (PYTHONPATH=SRC) with bytecode cached in a temporary directory (as an
installed package has it); the first runs of each command are warm-ups and not counted. The --precision auto probe
is pinned (MASKPLAY_AUTO_PRECISION=fp32) unless --probe, so that no run measures it."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SENTENCE = "The cat sat on the mat."
COMMANDS = {
    "version": ["--version"],
    "help": ["--help"],
    "score one sentence": ["score", "tta-mini-wiki", SENTENCE],
}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def commit(tree: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def run_once(src: Path, args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the process, less sensitive to a busy machine's load)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "maskplay", *args], env={**env, "PYTHONPATH": str(src)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def summary(runs: list[tuple[float, float]]) -> dict[str, float]:
    times, cpu = [w for w, _ in runs], [c for _, c in runs]
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "stdev_s": statistics.stdev(times) if len(times) > 1 else 0.0, "cpu_median_s": statistics.median(cpu),
            "runs": len(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=None, help="another tree's src/ to time alongside this one")
    parser.add_argument("--base-name", default=None, help="the base tree's name in the JSON, e.g. its commit")
    parser.add_argument("--runs", type=int, default=10, help="timed runs of each command and tree")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs of each command and tree first")
    parser.add_argument("--commands", nargs="+", choices=list(COMMANDS), default=list(COMMANDS))
    parser.add_argument("--probe", action="store_true", help="leave MASKPLAY_AUTO_PRECISION as it is")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "cli-startup" / "cli-startup.json")
    args = parser.parse_args()

    trees = {"this": REPO / "src"}
    if args.base is not None:
        trees["base"] = args.base.resolve()
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache  # bytecode cached, as an installed package has it; not in the trees
        if not args.probe:
            env["MASKPLAY_AUTO_PRECISION"] = "fp32"
        times: dict[str, dict[str, list[tuple[float, float]]]] = {
            name: {tree: [] for tree in trees} for name in args.commands}
        for name in args.commands:
            for _ in range(args.warmup):
                for src in trees.values():
                    run_once(src, COMMANDS[name], env)
            for _ in range(args.runs):  # the trees alternate: both see the same load
                for tree, src in trees.items():
                    times[name][tree].append(run_once(src, COMMANDS[name], env))
            line = "  ".join(f"{tree} {statistics.median(w for w, _ in t):.3f} s "
                             f"(CPU {statistics.median(c for _, c in t):.3f} s)" for tree, t in times[name].items())
            print(f"{name:>20}: {line}", flush=True)
    rows = []
    for name, by_tree in times.items():
        row = {"case": name, "command": ["maskplay", *COMMANDS[name]],
               **{tree: summary(t) for tree, t in by_tree.items()}}
        if "base" in by_tree:
            row["base_over_this"] = row["base"]["median_s"] / row["this"]["median_s"]
            row["base_over_this_cpu"] = row["base"]["cpu_median_s"] / row["this"]["cpu_median_s"]
        rows.append(row)
    result = {"benchmark": "cli_startup", "cpu": cpu_model(), "cores": os.cpu_count(),
              "load_average": os.getloadavg(), "python": platform.python_version(), "commit": commit(REPO),
              "base": (args.base_name or "base") if args.base else None, "rows": rows,
              "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
