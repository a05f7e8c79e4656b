"""A validation on the last training batch, so every run ends on a validated checkpoint."""

from __future__ import annotations

from typing import Any

import lightning as L


class FinalValidation(L.Callback):
    """Validate after the batch that ends fit, unless Lightning does so already.

    Why: Lightning validates every `val_check_interval` batches (or every
    `check_val_every_n_epoch` epochs), so a run whose `max_steps` or `max_epochs` is not a
    multiple of them ends after its last validation: metrics.json has no val/ metrics, and
    the final weights are never ranked by the checkpoint callback (which saves, with the
    monitored value, on validation end).

    How: on that batch it sets `trainer.should_stop`, which makes Lightning validate right
    after it, inside fit (as it does for early stopping). Lightning validates at most once
    per batch, so a batch that validates anyway gets no second one. A stop requested by
    others (max_time's Timer, early stopping, preemption) already gets that validation from
    Lightning, except in an epoch that `check_val_every_n_epoch` skips. Lightning honours a
    stop request only once `min_epochs` and `min_steps` are met (lightning-hydra-template's
    example experiment sets `min_epochs: 10`), so on that batch both are lifted too: fit
    ends after it whatever they say.

    Both conditions are counts that every DDP rank shares, so all ranks validate together.
    """

    def __init__(self) -> None:
        self._every_n_epochs: int | None = None  # check_val_every_n_epoch while lifted
        self._minimums: tuple[int | None, int | None] | None = None  # min_epochs, min_steps
        self._last_epoch, self._max_steps, self._batches = False, -1, 0  # per epoch

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        # _ends_fit first: enable_validation inspects the module (is_overridden) each call.
        if not self._ends_fit(trainer, batch_idx) or not trainer.enable_validation:
            return
        trainer.should_stop = True
        every = trainer.check_val_every_n_epoch
        if every is not None and (trainer.current_epoch + 1) % every != 0:
            # Lightning checks the epoch before the stop request: lift it for this batch.
            self._every_n_epochs = every
            trainer.check_val_every_n_epoch = 1
        loop = trainer.fit_loop
        if loop.min_epochs or loop.epoch_loop.min_steps:
            self._minimums = (loop.min_epochs, loop.epoch_loop.min_steps)
            loop.min_epochs, loop.epoch_loop.min_steps = None, None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.on_train_epoch_start(trainer, pl_module)  # Lightning skips that hook mid-epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # What _ends_fit compares with, once per epoch rather than per batch.
        max_epochs = trainer.max_epochs
        self._last_epoch = (max_epochs is not None and max_epochs >= 0
                            and trainer.current_epoch + 1 >= max_epochs)  # fmt: skip
        self._max_steps, self._batches = trainer.max_steps, trainer.num_training_batches

    def _ends_fit(self, trainer: L.Trainer, batch_idx: int) -> bool:
        """Whether fit stops after this batch: max_steps reached, or the last epoch's last
        batch."""
        if self._max_steps >= 0 and trainer.global_step >= self._max_steps:
            return True
        return self._last_epoch and batch_idx + 1 >= self._batches

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore(trainer)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore(trainer)

    def _restore(self, trainer: L.Trainer) -> None:
        if self._every_n_epochs is not None:
            trainer.check_val_every_n_epoch = self._every_n_epochs
            self._every_n_epochs = None
        if self._minimums is not None:
            trainer.fit_loop.min_epochs, trainer.fit_loop.epoch_loop.min_steps = self._minimums
            self._minimums = None
