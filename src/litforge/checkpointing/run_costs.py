"""What a preemption costs this run, measured, in its run.json: `restart_s`, seconds from
the process's start to its first training step (start-up, data, resume included), and
`checkpoint_save_s`, the median seconds training waited on a save. `python -m
litforge.plan --from-run DIR` reads them for its spot plan."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import lightning as L

from litforge import run_record
from litforge.checkpointing.callback import StoreCheckpoint


class RunCosts(L.Callback):
    def __init__(self, run_dir: Path, saver: StoreCheckpoint) -> None:
        self.run_dir = Path(run_dir)
        self.saver = saver
        self._started = False

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self._started:
            return
        self._started = True
        if trainer.is_global_zero:
            run_record.update(self.run_dir, restart_s=round(run_record.process_age_s(), 3))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero and self.saver.timings:
            median = statistics.median(t.wall_s for t in self.saver.timings)
            run_record.update(self.run_dir, checkpoint_save_s=round(median, 4))
