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
