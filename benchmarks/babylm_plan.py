"""benchmarks/gpu_babylm.sh's arithmetic: the words budget each strict-small recipe gets in the time the script
allows it (`plan`), and the one JSON of the script's results (`summarize`).

plan: words per step from the prepared data (source words per row, rows packed as the recipe packs them, times
the batch) and seconds per step from gpu_train_speed.py's "babylm FAMILY recipe" case (what `maskplay pretrain`
runs for that config, timed without data loading, times --overhead); the budget is the words of the steps that fit
--seconds, at most 100 M (the strict-small rule), or --words where given. Prints one line per family for the shell:
FAMILY MAX_STEPS MAX_WORDS WARMUP MARKS (the 2025 rules' checkpoint marks up to the budget, times --mark-scale,
comma-separated, or "-").

    python benchmarks/babylm_plan.py plan --data DIR --speed train-speed.json --seconds 60 --out plan.json
    python benchmarks/babylm_plan.py summarize --out-dir OUT --work WORK --families gpt-bert gpt bert tta
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
STRICT_SMALL = 100_000_000
MARKS = [*range(1_000_000, 10_000_001, 1_000_000), *range(20_000_000, 100_000_001, 10_000_000)]


def recipe(family: str, overrides: list[str]):
    from maskplay.config import apply_overrides
    from maskplay.tasks.train import load_train_config

    return apply_overrides(load_train_config(REPO / "configs" / "babylm" / f"strict-small-{family}.toml"), overrides)


def words_per_step(data: Path, batch_size: int, max_length: int, pack: bool) -> float:
    """The mean source words of a step: rows as the trainer forms them (packed or single sequences, truncated to
    max_length pieces) over the training split, times the batch."""
    from maskplay.data.dataset import TokenDataset
    from maskplay.tasks.train.batches import pack_groups, sequence_lengths

    split = TokenDataset(data / "train")
    if split.words is None:
        raise SystemExit(f"{data / 'train'} has no words.bin: prepare it with this version of maskplay")
    lengths = sequence_lengths(split)
    words = np.asarray(split.words, dtype=np.int64)
    starts = np.asarray(split.offsets[:-1], dtype=np.int64)
    if pack:
        bounds = pack_groups(lengths, max_length)
        row_start, row_end = starts[bounds[:-1]], starts[bounds[1:] - 1] + lengths[bounds[1:] - 1]
    else:
        row_start, row_end = starts, starts + lengths
    row_end = np.minimum(row_end, row_start + max_length)
    cumulative = np.concatenate([[0], np.cumsum(words)])
    per_row = cumulative[row_end] - cumulative[row_start]
    return float(per_row.mean()) * batch_size


def step_seconds(speed: Path | None, family: str) -> float | None:
    if speed is None or not speed.is_file():
        return None
    rows = json.loads(speed.read_text()).get("rows", [])
    return next((r["step_ms"] / 1000 for r in rows if r["case"] == f"babylm {family} recipe" and "step_ms" in r),
                None)


def plan_family(args: argparse.Namespace, family: str) -> dict:
    config = recipe(family, args.set)
    per_step = words_per_step(Path(args.data), config.data.batch_size, config.data.max_length, config.data.pack)
    seconds = step_seconds(Path(args.speed) if args.speed else None, family)
    if args.words:
        words, why = args.words, "--words"
    elif seconds is not None:
        steps_fit = int(args.seconds / (seconds * args.overhead))
        words, why = min(STRICT_SMALL, max(1, steps_fit) * per_step), "timed"
    else:
        words, why = args.default_words, "default (no timing for this recipe)"
    words = int(words)
    steps = max(1, math.ceil(words / per_step))
    warmup = max(1, round(0.016 * steps)) if steps > 2 else 0
    marks = [round(m * args.mark_scale) for m in MARKS if round(m * args.mark_scale) <= words]
    return {"family": family, "max_words": words, "max_steps": steps, "warmup_steps": warmup,
            "words_per_step": per_step, "step_s": seconds, "overhead": args.overhead, "budget_from": why,
            "checkpoint_at_words": marks}


def plan(args: argparse.Namespace) -> None:
    plans = [plan_family(args, family) for family in args.families]
    if args.out:
        Path(args.out).write_text(json.dumps({"seconds": args.seconds, "plans": plans}, indent=2) + "\n")
    for p in plans:
        marks = ",".join(map(str, p["checkpoint_at_words"])) or "-"
        print(p["family"], p["max_steps"], p["max_words"], p["warmup_steps"], marks)


def family_result(out_dir: Path, work: Path, family: str) -> dict:
    """What one family's run and evaluation left: words and steps seen, how it ended, BLiMP-dev."""
    result: dict = {"family": family}
    metrics = work / family / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.is_file() else []
    steps = [r for r in records if "words" in r]
    if steps:
        last = steps[-1]
        result.update(steps=last["step"], words_seen=last["words"], tokens_seen=last.get("tokens"),
                      train_seconds=last.get("elapsed_s"), last_loss=last.get("loss"))
    evals = [r["eval_loss"] for r in records if r.get("eval_loss") is not None]
    if evals:
        result["eval_loss"] = evals[-1]
    log = out_dir / f"train-{family}.log"
    if log.is_file():  # the trainer's last line: "[time] reached run.max_words=... at step N; held-out loss ..."
        ended = [line for line in log.read_text().splitlines() if line.startswith("[") and "final model:" in line]
        result["ended"] = ended[-1].split("] ", 1)[-1].split(";")[0] if ended else "no final model (see the log)"
    exported = work / family / "words"
    result["checkpoints_at_words"] = sorted(p.name for p in exported.iterdir()) if exported.is_dir() else []
    blimp = out_dir / f"blimp-{family}.json"
    if blimp.is_file():
        data = json.loads(blimp.read_text())
        result["blimp_dev_macro"] = data.get("results", {}).get("macro_accuracy")
        result["blimp_method"], result["blimp_pairs"] = data.get("method"), data.get("results", {}).get("pairs")
    raw = out_dir / f"blimp-raw-{family}.json"  # final-raw: the trained weights, where final is their average
    if raw.is_file():
        result["blimp_dev_raw"] = json.loads(raw.read_text()).get("results", {}).get("macro_accuracy")
    for other in sorted(out_dir.glob(f"blimp-{family}-*.json")):  # the same model scored another way (BLIMP_METHODS)
        data = json.loads(other.read_text())
        result.setdefault("blimp_dev_by_method", {})[data.get("method")] = data.get("results", {}).get("macro_accuracy")
    return result


def summarize(args: argparse.Namespace) -> None:
    out_dir, work = Path(args.out_dir), Path(args.work)
    summary: dict = {"families": [family_result(out_dir, work, f) for f in args.families]}
    for name in ("plan", "train-speed", "prepare-summary"):
        path = out_dir / f"{name}.json"
        if path.is_file():
            summary[name] = json.loads(path.read_text())
    # no machine paths in results: the corpus and tokenizer by their names, the benchmark's --out dropped
    if "prepare-summary" in summary:
        prep = summary["prepare-summary"]
        prep["corpus"] = [Path(c).name for c in prep.get("corpus", [])]
        prep["tokenizer"] = Path(prep.get("tokenizer", "")).name
    summary.get("train-speed", {}).get("args", {}).pop("out", None)
    (out_dir / "babylm.json").write_text(json.dumps(summary, indent=2) + "\n")
    for r in summary["families"]:
        print(f"{r['family']:<9} words seen {r.get('words_seen', '-'):>12,} steps {r.get('steps', '-'):>6} "
              f"BLiMP-dev {r.get('blimp_dev_macro', '-')}  {r.get('ended', '')}"
              if isinstance(r.get("words_seen"), int) else f"{r['family']:<9} no training record")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pl = sub.add_parser("plan")
    pl.add_argument("--data", required=True, help="the prepared data directory")
    pl.add_argument("--speed", default=None, help="gpu_train_speed.py --recipe's JSON")
    pl.add_argument("--seconds", type=float, default=60.0, help="training seconds per family")
    pl.add_argument("--overhead", type=float, default=1.3, help="a real step over a timed one (data, logging)")
    pl.add_argument("--words", type=int, default=None, help="this budget for every family instead")
    pl.add_argument("--default-words", type=int, default=5_000_000, help="the budget of a family with no timing")
    pl.add_argument("--mark-scale", type=float, default=1.0, help="the checkpoint marks times this (dry runs)")
    pl.add_argument("--families", nargs="+", default=["gpt-bert", "gpt", "bert", "tta"])
    pl.add_argument("--set", nargs="*", default=[], help="the --set overrides the runs get")
    pl.add_argument("--out", default=None)
    su = sub.add_parser("summarize")
    su.add_argument("--out-dir", required=True)
    su.add_argument("--work", required=True)
    su.add_argument("--families", nargs="+", default=["gpt-bert", "gpt", "bert", "tta"])
    args = p.parse_args()
    plan(args) if args.command == "plan" else summarize(args)


if __name__ == "__main__":
    sys.exit(main())
