"""What a preemption costs this run, measured, in its run.json: `restart_s`, seconds from
the process's start to its first training step (start-up, data, resume included);
`restart_phases_s`, the same split into its phases, plus the first step's own time and how
much longer it took than the next (compiling, mostly); and `checkpoint_save_s`, the median
seconds training waited on a save. `python -m litforge.plan --from-run DIR` reads them for
its spot plan."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import lightning as L

from litforge import run_record
from litforge.checkpointing.callback import StoreCheckpoint

# The phases of a restart, in order, each from the end of the one before: the process's
# start to the Trainer built (config composed and checked, the checkpoint to resume from
# found and fetched), the DataModule set up, Lightning's restore of the checkpoint (and
# the compile cache's fetch at fit start, litforge.compile_cache), the sanity
# check, and on to the first training batch.
PHASES = ("start_to_trainer", "data_ready", "restore", "sanity_check",
          "to_first_step")  # fmt: skip


class RunCosts(L.Callback):
    def __init__(self, run_dir: Path, saver: StoreCheckpoint) -> None:
        self.run_dir = Path(run_dir)
        self.saver = saver
        self._marks = {"start_to_trainer": run_record.process_age_s()}
        self._batches: list[float] = []  # process age at each of the first batches' ends
        self._first_start: float | None = None

    def _mark(self, phase: str) -> None:
        self._marks.setdefault(phase, run_record.process_age_s())

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._mark("data_ready")  # Lightning sets the DataModule up before the callbacks

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._mark("restore")  # the restore comes before the sanity check

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._mark("restore")  # no sanity check: it ends here
        self._mark("sanity_check")

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self._first_start is not None:
            return
        self._mark("to_first_step")
        self._first_start = self._marks["to_first_step"]
        if trainer.is_global_zero:
            run_record.update(self.run_dir, restart_s=round(self._first_start, 3))

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if len(self._batches) >= 2 or self._first_start is None:
            return
        self._batches.append(run_record.process_age_s())
        if len(self._batches) == 2 and trainer.is_global_zero:
            run_record.update(self.run_dir, restart_phases_s=self.phases())

    def phases(self) -> dict[str, float]:
        """Seconds of each phase, then `first_step` and `compile` (the first step's time
        beyond the second's)."""
        out, before = {}, 0.0
        for phase in PHASES:
            at = self._marks.get(phase, before)
            out[phase] = round(max(0.0, at - before), 3)
            before = max(before, at)
        assert self._first_start is not None
        first = self._batches[0] - self._first_start
        second = self._batches[1] - self._batches[0]
        out["first_step"] = round(first, 3)
        out["compile"] = round(max(0.0, first - second), 3)
        return out

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero and self.saver.timings:
            median = statistics.median(t.wall_s for t in self.saver.timings)
            run_record.update(self.run_dir, checkpoint_save_s=round(median, 4))
