"""Where a run reports: RUN_DIR/metrics.jsonl (one JSON object per record), RUN_DIR/loss.png (train and
held-out loss against step), RUN_DIR/train.log (the messages also printed), and TensorBoard event files in
RUN_DIR/tensorboard when the tensorboard package is installed. Only rank 0 creates a Metrics."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

METRICS_NAME = "metrics.jsonl"
PLOT_NAME = "loss.png"
LOG_NAME = "train.log"


class Metrics:
    def __init__(self, run_dir: str | Path, resume_step: int | None, tensorboard: bool,
                 stream: TextIO | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_NAME
        self.stream = stream if stream is not None else sys.stdout
        self.log_file = open(self.run_dir / LOG_NAME, "a", encoding="utf-8")
        self.records: list[dict[str, Any]] = []
        torn = ""
        if self.path.is_file() and resume_step is not None:
            # A run killed mid-write leaves its last line without a newline: that record is incomplete, and it
            # lies after the checkpoint resumed from, so the resumed run writes it again.
            *complete, torn = self.path.read_text(encoding="utf-8").split("\n")
            for number, line in enumerate(complete, 1):
                if line.strip():
                    try:
                        self.records.append(json.loads(line))
                    except json.JSONDecodeError as err:
                        raise ValueError(f"{self.path}:{number}: not JSON ({err}); "
                                         "move the file aside to resume without its history") from None
        if resume_step is not None:
            # records a killed run wrote after its last checkpoint are replayed by the resumed run
            self.records = [r for r in self.records if r["step"] <= resume_step]
        else:
            self.records = []
        self.path.write_text("".join(json.dumps(r) + "\n" for r in self.records), encoding="utf-8")
        self.file = open(self.path, "a", encoding="utf-8")
        if torn.strip():
            self.log(f"{self.path}: dropped an unfinished last line ({len(torn)} characters) the stopped run left")
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                self.log(f"TensorBoard is off: {err.name or 'tensorboard'} is not installed "
                         "(pip install tensorboard to get TensorBoard logs)")
            else:
                self.writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=resume_step)
        else:
            self.log("TensorBoard is off (run.tensorboard = false)")

    def log(self, message: str, stream: TextIO | None = None, echo: bool = True) -> None:
        """A line for the console (`stream`, default the Metrics' own; echo=False: train.log only) and train.log."""
        line = f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}"
        if echo:
            try:
                from tqdm import tqdm

                tqdm.write(line, file=stream or self.stream)  # does not break a progress bar on the same terminal
            except ImportError:  # pragma: no cover - tqdm is a dependency
                print(line, file=stream or self.stream, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def record(self, **values: Any) -> None:
        record = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}
        self.records.append(record)
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.writer is not None:
            for key, value in values.items():
                if key != "step" and isinstance(value, (int, float)):
                    tag = f"eval/{key[5:]}" if key.startswith("eval_") else f"train/{key}"
                    self.writer.add_scalar(tag, value, values["step"])

    def plot(self) -> Path | None:
        """Redraw loss.png from all records (train loss and held-out loss against step)."""
        train = [(r["step"], r["loss"]) for r in self.records if r.get("loss") is not None]
        held = [(r["step"], r["eval_loss"]) for r in self.records if r.get("eval_loss") is not None]
        if not train and not held:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.2))
        if train:
            ax.plot(*zip(*train, strict=True), label="train", linewidth=1, alpha=0.8)
        if held:
            ax.plot(*zip(*held, strict=True), "o-", label="held-out", linewidth=1.5, markersize=3)
        ax.set_xlabel("step")
        ax.set_ylabel("mean token loss (nats)")
        ax.set_title(self.run_dir.name)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        out = self.run_dir / PLOT_NAME
        tmp = out.with_name(".loss.tmp.png")
        fig.savefig(tmp, dpi=110)
        plt.close(fig)
        tmp.replace(out)
        return out

    def close(self) -> None:
        """Idempotent: train() calls it whether the run ended or failed."""
        self.file.close()
        self.log_file.close()
        if self.writer is not None:
            self.writer.close()


class RunLog:
    """A line for the console and train.log; warnings go to stderr, so that stdout keeps only results. Lines
    logged before the Metrics (and its train.log) exist are printed at once and written to train.log on attach."""

    def __init__(self, is_main: bool, stream: TextIO | None = None) -> None:
        self.is_main = is_main
        self.stream = stream if stream is not None else sys.stdout
        self.metrics: Metrics | None = None
        self._pending: list[str] = []

    def __call__(self, message: str) -> None:
        if not self.is_main:
            return
        stream = sys.stderr if message.startswith("WARNING") else self.stream
        if self.metrics is None:
            print(message, file=stream, flush=True)
            self._pending.append(message)
        else:
            self.metrics.log(message, stream=stream)

    def attach(self, metrics: Metrics) -> None:
        self.metrics = metrics
        for message in self._pending:
            metrics.log(message, echo=False)  # printed already; now into train.log
        self._pending.clear()


class Window:
    """The training sums between two logged steps, and the training time they took (evaluations and
    checkpoints are paused out, so tokens/s counts training only)."""

    def __init__(self) -> None:
        self.reset(time.monotonic())

    def reset(self, now: float) -> None:
        self.loss = self.n = self.tokens = 0.0  # all-reduced over processes
        self.parts: dict[str, float] = {}  # this process's loss parts (ModelOutput.parts) x targets
        # this process's targets in the micro-batches each part was given for, which weigh the part
        self.part_n: dict[str, float] = {}
        self.time = now

    def add_micro(self, n: int, parts: dict[str, float]) -> None:
        for key, value in parts.items():
            if math.isnan(value):  # a part this micro-batch has no targets of (a GPT-BERT mode it lacks)
                continue
            self.parts[key] = self.parts.get(key, 0.0) + value
            self.part_n[key] = self.part_n.get(key, 0.0) + n

    def add_step(self, loss: float, n: float, tokens: float) -> None:
        self.loss += loss
        self.n += n
        self.tokens += tokens

    def close(self) -> tuple[float, float, dict[str, float]]:
        """(mean loss, tokens per second, mean loss parts) of the window; then a new window starts."""
        now = time.monotonic()
        loss = self.loss / self.n
        rate = self.tokens / max(now - self.time, 1e-9)
        parts = {k: v / max(self.part_n[k], 1.0) for k, v in self.parts.items()}
        self.reset(now)
        return loss, rate, parts

    def pause(self, started: float) -> None:
        self.time += time.monotonic() - started
