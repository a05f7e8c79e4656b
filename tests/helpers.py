"""Callbacks that tests inject into real training subprocesses via `+callbacks.NAME=...`."""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning as L


class KillAtStep(L.Callback):
    """SIGKILL this process (every rank) once `step` optimizer steps are done: a lost VM."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class SignalAtStep(L.Callback):
    """Send `signum` to rank 0's process at `step`, as a cloud's spot notice would."""

    def __init__(self, step: int, signum: int = signal.SIGTERM) -> None:
        self.step = step
        self.signum = signum
        self.sent = False

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step and trainer.is_global_zero and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)


# The S3 server of the running test, for callbacks that simulate an outage in-process.
CURRENT_S3: Any = None


class StoreOutage(L.Callback):
    """Stop the test's S3 server after `stop_at` steps; start it again after `restart_at`."""

    def __init__(self, stop_at: int, restart_at: int | None = None) -> None:
        self.stop_at = stop_at
        self.restart_at = restart_at

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.stop_at and CURRENT_S3.process is not None:
            CURRENT_S3.stop()
        if trainer.global_step == self.restart_at and CURRENT_S3.process is None:
            CURRENT_S3.start()  # moto forgets everything: the bucket is made anew
