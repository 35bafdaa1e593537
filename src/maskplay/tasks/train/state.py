"""Where a run stands: the counters a checkpoint saves and a resumed run starts from."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    position: int = 0  # optimizer steps taken in the epoch (batches are a pure function of epoch and position)
    tokens_seen: int = 0
    words_seen: int = 0  # source words of the training sequences seen (data/words.py), repeats included
    elapsed_before: float = 0.0  # training seconds of the runs this one resumes
    last_eval: float | None = None
    started: float | None = None  # time.monotonic() when this process's loop began

    def start_clock(self) -> None:
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.started if self.started is not None else 0.0)

    def progress(self) -> dict[str, int]:
        return {"words_seen": self.words_seen, "tokens_seen": self.tokens_seen, "step": self.step}
