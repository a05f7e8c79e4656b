"""SIGTERM (a spot notice) or SIGUSR1 (SLURM) during a sweep: the trial running finishes
(a training run checkpoints and stops on it by itself), no further trial starts, and the
sweep exits with 128 + the signal's number; the same command resumes it.

"No further trial starts" is checked at the last moment: before each ask, before the
launcher is called, and (for trials run in this process) just before the trial's own code,
since asking, composing and launching a trial take a while (a GP sampler: seconds) and a
signal that lands in between must not cost the grace period a trial's training.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from litforge.errors import LitforgeError

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_watching: SignalWatch | None = None  # the watch of the sweep running in this process


class SweepStopped(LitforgeError):
    """The sweep stopped on a signal between trials; rerunning the command resumes it."""

    interrupts = True

    def __init__(self, signum: int, study_name: str) -> None:
        self.exit_code = 128 + signum
        super().__init__(
            f"{signal.Signals(signum).name} received: study {study_name} stopped before its "
            "next trial (the trials that ran are recorded); the same command resumes it"
        )


class NotStarted(LitforgeError):
    """A launched trial whose code never ran: the sweep had received a signal."""

    interrupts = True

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.why = f"{signal.Signals(signum).name} received before it"
        super().__init__(f"not started: {self.why}")


class SignalWatch:
    """Records the first of SIGNALS while the sweep runs (a trial's training installs its
    own handler over this one, and gives it back when it ends; it reads `received` off
    the handler it replaces, `litforge.checkpointing.preemption`)."""

    def __init__(self) -> None:
        self.received: int | None = None

    def _record(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum

    def rearm(self) -> None:
        """This watch's handler again, in place of whatever the last trial left (Lightning
        restores a handler of its finished trainer, which calls this one only for SIGTERM)."""
        if _watching is self and threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                signal.signal(sig, self._record)

    @contextlib.contextmanager
    def active(self) -> Iterator[SignalWatch]:
        global _watching
        if threading.current_thread() is not threading.main_thread():
            yield self  # signals reach the main thread only
            return
        previous = {sig: signal.signal(sig, self._record) for sig in SIGNALS}
        _watching = self
        try:
            yield self
        finally:
            _watching = None
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def refuse_to_start() -> None:
    """Raise NotStarted when the sweep running in this process has received a signal: a
    trial's first call (a launcher's job in another process has no watch, and runs)."""
    if _watching is not None and _watching.received is not None:
        raise NotStarted(_watching.received)
