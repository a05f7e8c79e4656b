"""Plain log lines of a run's metrics: readable in CI logs, files and `tail -f`.

One line per finished training epoch with that epoch's own metrics (its training
aggregates and the validation that closed it), and one line for each validation inside an
epoch (`val_check_interval`) with that validation's metrics, but the one that ends the
epoch (at `max_steps` or a stop), which is on the epoch's line. Every scalar the module logs
is shown, whatever its name (`val_loss`, `val/acc`, `acc_best`), the monitored one first.

Why the epoch's line waits for the epoch's end: Lightning validates before it aggregates
the training epoch, so at validation end `train_loss` is a step value and `train/acc` is
still the previous epoch's. The line is written when the next epoch starts or training
ends, after the module's own `on_train_epoch_end` logged what it computes there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import lightning as L

log = logging.getLogger("litforge")


def epoch_scalars(metrics: Mapping[str, Any], first: str | None = None) -> dict[str, float]:
    """The epoch-level scalars of Lightning's callback metrics, `first` leading, the rest
    sorted: `X_step` (a single batch's value) is left out, and `X_epoch` too where `X`
    itself holds the same epoch value."""
    found: dict[str, float] = {}
    for name, value in metrics.items():
        numel = getattr(value, "numel", None)
        if (numel is not None and numel() != 1) or name.endswith("_step"):
            continue
        if name.endswith("_epoch") and name[: -len("_epoch")] in metrics:
            continue
        try:
            found[name] = float(value)
        except (TypeError, ValueError):
            continue
    # Learning rates (LearningRateMonitor's `lr-*`) after the model's figures.
    order = sorted(found, key=lambda name: (name != first, name.startswith("lr-"), name))
    return {name: found[name] for name in order}


def monitored(trainer: L.Trainer) -> str | None:
    """The metric the run keeps its best checkpoint (or stops early) by, if any: the
    `monitor` of the first callback that has one (litforge's checkpointing, Lightning's
    ModelCheckpoint or EarlyStopping)."""
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str) and monitor:
            return monitor
    return None


def line(metrics: Mapping[str, float]) -> str:
    return " ".join(f"{name}={value:.4g}" for name, value in metrics.items())


class EpochLog(L.Callback):
    """`epoch E step S: key=value ...` lines on rank 0 only (see the module's docstring)."""

    def __init__(self) -> None:
        self._finished: tuple[int, int] | None = None  # (epoch, step) not yet written
        self._trained = False  # a training batch ran in this process since the last line

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        fitting = trainer.state.fn == "fit"
        if fitting and self._closes_epoch(trainer):
            return  # written with the epoch's training metrics, on the epoch's line
        metrics = epoch_scalars(self._validation_metrics(trainer), monitored(trainer))
        log.info("epoch %d step %d: %s", trainer.current_epoch, trainer.global_step, line(metrics))

    def on_train_batch_end(self, *args: Any) -> None:
        self._trained = True

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Without a batch: a run resumed from a checkpoint saved at the epoch's closing
        # validation, which Lightning ends again; the run that trained it wrote its line.
        if self._trained:
            self._finished = (trainer.current_epoch, trainer.global_step)
        self._trained = False

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write_finished(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write_finished(trainer)

    def _write_finished(self, trainer: L.Trainer) -> None:
        if self._finished is None:
            return
        epoch, step = self._finished
        self._finished = None
        if trainer.is_global_zero:
            metrics = epoch_scalars(trainer.callback_metrics, monitored(trainer))
            log.info("epoch %d step %d: %s", epoch, step, line(metrics))

    @staticmethod
    def _closes_epoch(trainer: L.Trainer) -> bool:
        """Whether this validation is the epoch's last: on its last batch, at `max_steps`,
        or at a stop Lightning honours (FinalValidation's, early stopping's)."""
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            return True
        if 0 <= trainer.max_steps <= trainer.global_step:
            return True
        # Lightning's own test for a stop before min_epochs/min_steps (private; if it goes,
        # a stop request counts as honoured).
        return trainer.should_stop and getattr(trainer.fit_loop, "_can_stop_early", True)

    @staticmethod
    def _validation_metrics(trainer: L.Trainer) -> Mapping[str, Any]:
        """What this validation logged, without the training metrics beside it in
        `callback_metrics` (those are a step's, or the previous epoch's, at this point).
        Lightning keeps them apart only in its loop's results (no public accessor); if that
        changes, the metrics whose names do not start with `train` stand in."""
        try:
            results = trainer._evaluation_loop._results  # noqa: SLF001
            return results.metrics(False)["callback"]
        except (AttributeError, KeyError, TypeError):
            return {k: v for k, v in trainer.callback_metrics.items() if not k.startswith("train")}
