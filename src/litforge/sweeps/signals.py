"""SIGTERM (a spot notice) or SIGUSR1 (SLURM) during a sweep: the trial running finishes
(a training run checkpoints and stops on it by itself), no further trial starts, and the
sweep exits with 128 + the signal's number; the same command resumes it."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from litforge.errors import LitforgeError

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class SweepStopped(LitforgeError):
    """The sweep stopped on a signal between trials; rerunning the command resumes it."""

    interrupts = True

    def __init__(self, signum: int, study_name: str) -> None:
        self.exit_code = 128 + signum
        super().__init__(
            f"{signal.Signals(signum).name} received: study {study_name} stopped before its "
            "next trial (the trials that ran are recorded); the same command resumes it"
        )


class SignalWatch:
    """Records the first of SIGNALS while the sweep runs (a trial's training installs its
    own handler over this one, and gives it back when it ends)."""

    def __init__(self) -> None:
        self.received: int | None = None

    def _record(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum

    @contextlib.contextmanager
    def active(self) -> Iterator[SignalWatch]:
        if threading.current_thread() is not threading.main_thread():
            yield self  # signals reach the main thread only
            return
        previous = {sig: signal.signal(sig, self._record) for sig in SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
