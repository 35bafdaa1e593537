"""Stopping a run cleanly on SIGINT / SIGTERM."""

from __future__ import annotations

import signal
import threading
from typing import Any

EXIT_SIGINT = 130  # the shell's code for a process ended by Ctrl-C


class StopSignals:
    """SIGINT / SIGTERM only set a flag; the loop checkpoints and stops after the current step. A second SIGINT
    interrupts at once (KeyboardInterrupt), for when the step itself hangs."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        # handlers can only be installed from the main thread (train() called from a worker thread keeps none)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum

    def ignore_sigterm(self) -> None:
        """From now on, and after the `with` block too, SIGTERM is ignored: for a process that is already ending
        with an error it must still print (torchrun's agent sends SIGTERM once another process has failed)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._previous[signal.SIGTERM] = signal.SIG_IGN

    def __exit__(self, *_: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def describe(self) -> tuple[str, int]:
        """(what stopped the run, the exit code for it) once the loop stopped as interrupted."""
        name = signal.Signals(self.received).name if self.received else "a signal on another process"
        return name, EXIT_SIGINT if self.received == signal.SIGINT else 0
