"""The effective batch a run trains with: samples per optimizer step, all processes together.

Measured, not read from the config: the per-process batch is what the train loader yields
(`litforge.datamodule_facts.per_process_batch`), since a DataModule may divide its
`batch_size` by the number of processes; the accumulation is the trainer's after a resume
on another shape adapted it (`litforge.checkpointing.shape`). Said once, before the first
step (at the sanity check or at train start, whichever comes first, and at the end of a fit
that had nothing left to train), logged to every logger as `effective_batch_size`, and
handed to `then` (the loggers' record of the run's facts, litforge.tracking.lifecycle);
the run record (metrics.json) gets it as `effective_batch_size`.
"""

from __future__ import annotations

from collections.abc import Callable

import lightning as L

from litforge import console
from litforge.datamodule_facts import per_process_batch


class EffectiveBatch(L.Callback):
    def __init__(self, then: Callable[[L.Trainer, int | None], None] | None = None) -> None:
        self.then = then
        self.size: int | None = None
        self._said = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._said = False

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.datamodule is not None:  # else the module's own loader, built later
            self._measure(trainer)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._measure(trainer)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._measure(trainer)

    def _measure(self, trainer: L.Trainer) -> None:
        if self._said:
            return
        self._said = True
        micro = per_process_batch(trainer)
        if micro is None:
            self.size = None
            console.info("effective batch size unknown: the train loader has no batch_size "
                         "and its first batch no tensor to count")  # fmt: skip
        else:
            self.size = micro * trainer.accumulate_grad_batches * trainer.world_size
            console.info(
                "effective batch size %d = batch_size %d per process (its train loader's) x "
                "accumulate_grad_batches %d x %d processes",
                self.size, micro, trainer.accumulate_grad_batches, trainer.world_size,
            )  # fmt: skip
            for logger in trainer.loggers:
                logger.log_hyperparams({"effective_batch_size": self.size})
        if self.then is not None:
            self.then(trainer, self.size)

    def final_metrics(self, trainer: L.Trainer) -> dict[str, int | None]:
        """For the run record (the hook litforge.hooks.ReportsFinalMetrics)."""
        return {"effective_batch_size": self.size}
