"""One plain log line per validation: readable in CI logs, files and `tail -f`."""

from __future__ import annotations

import logging

import lightning as L

log = logging.getLogger("litforge")


class EpochLog(L.Callback):
    """Logs `epoch E step S: key=value ...` with the epoch's metrics, on rank 0 only."""

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        metrics = {
            k: float(v)
            for k, v in sorted(trainer.callback_metrics.items())
            if k.startswith(("train/", "val/")) and not k.endswith("_step") and v.numel() == 1
        }
        values = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        log.info("epoch %d step %d: %s", trainer.current_epoch, trainer.global_step, values)
