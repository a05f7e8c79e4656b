"""A LightningModule that reads a torchmetrics metric's value inside training_step, as
some lightning-hydra-template projects log a running RMSE: under DDP `compute()` gathers
the metric's state from every rank."""

from __future__ import annotations

import torch

from tests.user_project.lit_module import LitClassifier


class ComputesInStep(LitClassifier):
    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train/rms", torch.sqrt(self.train_loss.compute()), on_step=False, on_epoch=True)
        return loss
