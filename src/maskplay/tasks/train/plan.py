"""The steps that fit run.max_minutes: plan_for_minutes times a few steps of a trial run (the same config, into a
temporary directory) and sets optim.max_steps to the steps that fit, the warmup scaled with them (budget.fit_steps),
as benchmarks/gpu_babylm.sh plans its runs from timed steps. The plan is an ordinary optim.max_steps and
optim.warmup_steps, written in the run's config.toml: a resumed run reads them back and continues exactly."""

from __future__ import annotations

import dataclasses
import io
import math
import statistics
import tempfile
import time
from pathlib import Path

from .budget import fit_steps
from .config import TrainConfig
from .loop import read_metrics, train

TRIAL_STEPS = 6  # steps of the trial run; the first two (kernels built, caches warmed) are not timed
MARGIN = 0.9  # share of the budget planned: data loading varies, evaluations and checkpoints take time


def step_seconds(config: TrainConfig, steps: int = TRIAL_STEPS) -> float:
    """Seconds per optimizer step of `config`, timed on a trial run of `steps` steps into a temporary directory
    (the median of the steps after the first two; the run's own directory is not touched)."""
    with tempfile.TemporaryDirectory(prefix="maskplay-plan-") as tmp:
        trial = dataclasses.replace(
            config, optim=dataclasses.replace(config.optim, max_steps=steps, warmup_steps=min(steps, 1), cooldown_steps=0),
            run=dataclasses.replace(config.run, out_dir=str(Path(tmp) / "trial"), eval_every=0, eval_batches=1,
                                    save_every=0, log_every=1, progress=False, tensorboard=False, max_minutes=None,
                                    stop_at_step=None, max_words=None, checkpoint_at_words=[]))
        train(trial, stream=io.StringIO())
        elapsed = [r["elapsed_s"] for r in read_metrics(trial.run.out_dir) if "loss" in r and "elapsed_s" in r]
    gaps = [b - a for a, b in zip(elapsed, elapsed[1:], strict=False)][1:]
    return statistics.median(gaps) if gaps else (elapsed[-1] if elapsed else 0.0)


def plan_for_minutes(config: TrainConfig, seconds_per_step: float | None = None,
                     keep_warmup: bool = False) -> tuple[TrainConfig, str]:
    """(config with optim.max_steps the steps that fit run.max_minutes and its warmup scaled, the line that says so).
    seconds_per_step: measured by step_seconds unless given; keep_warmup: the warmup and cooldown the user chose
    stay (the steps are then at least as many)."""
    start = time.monotonic()
    per_step = step_seconds(config) if seconds_per_step is None else seconds_per_step
    budget = config.run.max_minutes * 60  # type: ignore[operator]
    steps = max(1, math.floor(MARGIN * budget / max(per_step, 1e-6)))
    if keep_warmup:
        steps = max(steps, config.optim.warmup_steps + config.optim.cooldown_steps)
        optim = dataclasses.replace(config.optim, max_steps=steps)
    else:
        optim = fit_steps(config.optim, steps)
    timed = f", timed on {TRIAL_STEPS} trial steps in {time.monotonic() - start:.0f} s" if seconds_per_step is None else ""
    line = (f"run.max_minutes={config.run.max_minutes:g} fits about {steps:,} steps of {per_step * 1000:.0f} ms{timed}: "
            f"optim.max_steps={steps}, optim.warmup_steps={optim.warmup_steps}"
            + (f", optim.cooldown_steps={optim.cooldown_steps}" if optim.cooldown_steps else "")
            + " (set optim.max_steps to choose the schedule yourself)")
    return dataclasses.replace(config, optim=optim), line
