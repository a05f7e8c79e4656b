"""Callbacks the sweep tests inject into trials (`+callbacks.NAME._target_=...`)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import lightning as L


class KillOnceInRun(L.Callback):
    """SIGKILL the process at `step` in the run whose directory is named `run`, the first
    time only (a marker file beside the run directories remembers): a lost VM mid-trial."""

    def __init__(self, step: int, run: str | int) -> None:
        self.step, self.run = step, str(run)  # `run=2` arrives as an int

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        run_dir = Path(trainer.default_root_dir)
        marker = run_dir.parent / f"killed-{self.run}"
        if run_dir.name == self.run and trainer.global_step == self.step and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
