"""A CSV metrics log that survives preemption: after a resume it reads as one unbroken run.

Lightning's CSVLogger deletes an existing `metrics.csv` when it starts (lightning 2.6,
`_ExperimentWriter._check_log_dir_exists`), so a resumed run would lose every row before
the resume point; kept as is, rows after it would appear twice. `ResumableCSVLogger`
keeps the file, and `CsvLogPosition` cuts it back on resume to the rows logged at steps
before the checkpoint's global step N. Those are exactly the rows the resumed run does not
log again: a row's `step` is the index of the optimizer step it belongs to, and the rows
logged just after a save (that step's training loss, its validation, the epoch summary)
carry step N-1. Lightning's restart logic does not redo that step or its validation; it
does call on_train_epoch_end again, but with fresh accumulators, so nothing is logged
(`Classifier.on_train_epoch_end` skips an empty epoch). Everything the resumed run logs
carries step >= N. A fresh start (no checkpoint) empties the file instead.
"""

from __future__ import annotations

import csv
from typing import Any

import lightning as L
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.trainer.states import TrainerFn


class _KeepingWriter(ExperimentWriter):
    """Appends to an existing metrics.csv; `keep_steps_before` cuts it back."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as file:
                header = next(csv.reader(file), [])
            self.metrics_keys = sorted(header)  # else the first save rewrites with fewer keys

    def _check_log_dir_exists(self) -> None:
        """Keep the existing file (the upstream writer deletes it)."""

    def keep_steps_before(self, step: int) -> None:
        """Drop every row (on disk or pending) logged at `step` or later."""
        self.metrics = [row for row in self.metrics if row["step"] < step]
        if not self._fs.isfile(self.metrics_file_path):
            return
        header, rows = self._read()
        kept = [row for row in rows if row.get("step") and int(row["step"]) < step]
        if len(kept) == len(rows):
            return
        with self._fs.open(self.metrics_file_path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=header)
            writer.writeheader()
            writer.writerows(kept)

    def _read(self) -> tuple[list[str], list[dict[str, str]]]:
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            reader = csv.DictReader(file)
            rows = list(reader)
            return list(reader.fieldnames or []), rows


class ResumableCSVLogger(CSVLogger):
    """`lightning.pytorch.loggers.CSVLogger` whose metrics.csv outlives a preempted attempt."""

    @property
    @rank_zero_experiment
    def experiment(self) -> _KeepingWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _KeepingWriter(log_dir=self.log_dir)
        return self._experiment


class CsvLogPosition(L.Callback):
    """Cuts metrics.csv back to the resumed checkpoint, and keeps rows on disk in time.

    Rows are flushed at each checkpoint and at the first batch after it (the rows logged
    just after a save are the ones the resumed run relies on the killed attempt for).
    """

    def __init__(self) -> None:
        self._flush_at_next_batch = False

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Lightning calls this hook for trainer.test(ckpt_path=best) too: only a resumed
        # fit may cut the log back.
        if trainer.state.fn != TrainerFn.FITTING or not trainer.is_global_zero:
            return
        for logger in _csv_loggers(trainer):
            logger.experiment.keep_steps_before(int(checkpoint["global_step"]))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.ckpt_path is None and trainer.is_global_zero:  # a fresh start
            for logger in _csv_loggers(trainer):
                logger.experiment.keep_steps_before(0)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._flush(trainer)
        self._flush_at_next_batch = True

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self._flush_at_next_batch:
            self._flush_at_next_batch = False
            self._flush(trainer)

    @staticmethod
    def _flush(trainer: L.Trainer) -> None:
        for logger in _csv_loggers(trainer):
            logger.save()  # rank-zero only


def _csv_loggers(trainer: L.Trainer) -> list[ResumableCSVLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, ResumableCSVLogger)]
