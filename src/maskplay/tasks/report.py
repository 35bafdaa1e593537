"""`maskplay plot-runs`: held-out loss curves of several training runs in one picture, against wall-clock
minutes and against training tokens, for equal-budget comparisons between families."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .viz import plt, save_figure


def read_run(run_dir: str | Path) -> dict[str, Any]:
    """The eval and train records of a run's metrics.jsonl, with tokens seen attached to each eval."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {run_dir} a `maskplay pretrain` run directory?")
    from ..data.source import read_lines

    records, numbers = [], []
    for number, line in enumerate(read_lines(path)[1], 1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not JSON: {err}") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: a JSON object per line expected, got {line[:60]!r}")
            records.append(record)
            numbers.append(number)
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_loss" in r]
    if not evals:
        raise ValueError(f"{path}: no held-out loss records (\"eval_loss\"): nothing to plot for {run_dir}")
    for number, r in zip(numbers, records, strict=True):  # what the plot reads, checked: one line naming a gap
        for key in ("step", "eval_loss", "elapsed_s") if "eval_loss" in r else ():
            value = r.get(key)
            if key == "eval_loss" and value is None:  # a non-finite loss is written as null: a gap in the curve
                r[key] = float("nan")
            elif not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"{path}:{number}: an eval record without a number in \"{key}\" (written by "
                                 "another tool or an older maskplay?); plot-runs needs step, eval_loss, elapsed_s")
    tokens_at = {r["step"]: r["tokens"] for r in train if "tokens" in r}
    for r in evals:
        before = [s for s in tokens_at if s <= r["step"]]
        r["tokens"] = tokens_at[max(before)] if before else 0
    return {"name": Path(run_dir).name, "train": train, "evals": evals}


def plot_runs(run_dirs: list[str | Path], out: str | Path, title: str = "held-out loss") -> Path:
    runs = [read_run(d) for d in run_dirs]
    fig, (by_time, by_tokens) = plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        ev = run["evals"]
        if not ev:
            continue
        by_time.plot([r["elapsed_s"] / 60 for r in ev], [r["eval_loss"] for r in ev], marker=".", label=run["name"])
        by_tokens.plot([r["tokens"] / 1e6 for r in ev], [r["eval_loss"] for r in ev], marker=".", label=run["name"])
    by_time.set_xlabel("wall-clock minutes")
    by_tokens.set_xlabel("training tokens (millions)")
    for ax in (by_time, by_tokens):
        ax.set_ylabel("held-out loss (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    return save_figure(fig, out)


def summary_rows(run_dirs: list[str | Path]) -> list[dict[str, Any]]:
    rows = []
    for d in run_dirs:
        run = read_run(d)
        last_train = run["train"][-1] if run["train"] else {}
        last_eval = run["evals"][-1] if run["evals"] else {}
        rows.append({"run": run["name"], "steps": last_train.get("step"), "tokens": last_train.get("tokens"),
                     "minutes": round(last_train.get("elapsed_s", 0) / 60, 1),
                     "first_eval_loss": run["evals"][0]["eval_loss"] if run["evals"] else None,
                     "last_eval_loss": last_eval.get("eval_loss")})
    return rows

