"""Progress of long work on stderr, one way for every command: a tqdm bar when stderr is a terminal, otherwise
(a log file, a pipe, CI, nohup) a plain line every INTERVAL seconds, so that a log shows how far a run got and
how fast, without the carriage returns of a bar. Nothing is printed for work shorter than one interval.

    with Progress(total=len(rows), desc="score", unit="line") as bar:
        for chunk in chunks:
            ...
            bar.update(len(chunk))
            bar.set_postfix(loss=f"{loss:.3f}")   # shown on the bar, or at the end of the next plain line
    for batch in track(batches, desc="embed", unit="batch"):
        ...

`enabled=False` prints nothing (a library call that was not asked for progress). The interval is
MASKPLAY_PROGRESS_SECONDS from the environment when set, else 30 seconds."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")
DEFAULT_INTERVAL = 30.0


def _now() -> float:
    return time.monotonic()


def interval_seconds() -> float:
    """Seconds between plain progress lines: MASKPLAY_PROGRESS_SECONDS, else DEFAULT_INTERVAL."""
    value = os.environ.get("MASKPLAY_PROGRESS_SECONDS")
    if value is None or not value.strip():
        return DEFAULT_INTERVAL
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"MASKPLAY_PROGRESS_SECONDS must be a number of seconds, got {value!r}") from None
    if not seconds >= 0:
        raise ValueError(f"MASKPLAY_PROGRESS_SECONDS must be 0 or more, got {value!r}")
    return seconds


def is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """Counts work done (update) and shows it: a tqdm bar on a terminal, plain periodic lines elsewhere."""

    def __init__(self, total: int | None = None, desc: str = "", unit: str = "it", initial: int = 0,
                 enabled: bool = True, stream: TextIO | None = None, interval: float | None = None,
                 leave: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.enabled = enabled
        self.terminal = enabled and is_terminal(self.stream)
        self.interval = interval_seconds() if interval is None else interval
        self.postfix: dict[str, Any] = {}
        self.lines = 0  # plain lines printed
        self._initial = initial
        self._start = self._last = _now()
        self._closed = False
        self.bar: Any = None
        if self.terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc or None, unit=unit, file=self.stream,
                            leave=leave, dynamic_ncols=True, mininterval=1.0)

    @property
    def mode(self) -> str:
        """"bar" (tqdm on a terminal), "lines" (plain periodic lines) or "off"."""
        return "bar" if self.bar is not None else "lines" if self.enabled else "off"

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled:
            now = _now()
            if now - self._last >= self.interval:
                self._last = now
                self._line(now)

    def set_postfix(self, **values: Any) -> None:
        """Values shown after the count (loss=..., tok_s=...): on the bar at its next refresh, or on the next line."""
        self.postfix = values
        if self.bar is not None:
            self.bar.set_postfix(values, refresh=False)

    def write(self, line: str) -> None:
        """A message that does not break the bar (tqdm.write on a terminal, else a plain line)."""
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """End the bar; in line mode, a last line with the totals when any line was printed before."""
        if self._closed:
            return
        self._closed = True
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.lines:
            self._line(_now(), done=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _line(self, now: float, done: bool = False) -> None:
        elapsed = now - self._start
        rate = (self.n - self._initial) / elapsed if elapsed > 0 else 0.0
        unit = self.unit if self.unit.endswith("s") else self.unit + ("es" if self.unit.endswith(("ch", "sh", "x")) else "s")
        count = f"{self.n:,}/{self.total:,} {unit}" if self.total else f"{self.n:,} {unit}"
        if self.total:
            count += f" ({100 * self.n / self.total:.0f}%)"
        parts = [count, f"{_clock(elapsed)} elapsed", f"{rate:,.3g} {self.unit}/s"]
        if done:
            parts.append("done")
        elif self.total and rate > 0 and self.n < self.total:
            left = (self.total - self.n) / rate
            if math.isfinite(left):
                parts.append(f"about {_clock(left)} left")
        extra = " ".join(f"{k}={v}" for k, v in self.postfix.items())
        text = f"{self.desc}: " if self.desc else ""
        print(text + ", ".join(parts) + (f"; {extra}" if extra else ""), file=self.stream, flush=True)
        self.lines += 1


def track(items: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it", enabled: bool = True,
          leave: bool = True, stream: TextIO | None = None, interval: float | None = None) -> Iterator[T]:
    """Iterate over items with a Progress (total: len(items) when it has one)."""
    if total is None:
        try:
            total = len(items)  # type: ignore[arg-type]
        except TypeError:
            total = None
    with Progress(total=total, desc=desc, unit=unit, enabled=enabled, leave=leave, stream=stream,
                  interval=interval) as progress:
        for item in items:
            yield item
            progress.update(1)
