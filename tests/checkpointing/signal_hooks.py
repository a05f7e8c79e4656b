"""A callback that sends its own process a signal from a chosen Trainer hook, as a spot
notice arriving during a run's setup would."""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning as L


class SignalAt(L.Callback):
    def __init__(self, hook: str, signum: int = signal.SIGTERM) -> None:
        self.hook, self.signum = hook, signum

    def _maybe(self, hook: str) -> None:
        if hook == self.hook:
            os.kill(os.getpid(), self.signum)

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self._maybe("setup")

    def on_fit_start(self, *args: Any) -> None:
        self._maybe("on_fit_start")

    def on_sanity_check_start(self, *args: Any) -> None:
        self._maybe("on_sanity_check_start")
