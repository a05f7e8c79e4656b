"""Step metrics a callback writes at Lightning's logging step, with Lightning's step and
epoch, without the `logger.save()` that `_LoggerConnector.log_metrics` makes after each
call (csv rewrites its file on each save): Lightning's own save of that step writes them."""

from __future__ import annotations

import lightning as L


def log_step_metrics(trainer: L.Trainer, metrics: dict[str, float]) -> None:
    if not trainer.loggers or not metrics:
        return
    trainer._logger_connector._logged_metrics.update(metrics)  # trainer.logged_metrics
    row = {**metrics, "epoch": trainer.current_epoch}
    step = trainer.fit_loop.epoch_loop._batches_that_stepped
    for logger in trainer.loggers:
        logger.log_metrics(row, step=step)


def is_logging_step(trainer: L.Trainer) -> bool:
    """During a training batch: Lightning's `_logger_connector.should_update_logs`, from
    plain attributes (its property asks which loop is active, a few us per call), and only
    where there are loggers to write to."""
    every = trainer.log_every_n_steps
    if not every or not trainer._loggers:
        return False
    return (trainer.fit_loop.epoch_loop._batches_that_stepped + 1) % every == 0 or bool(
        trainer.should_stop
    )
