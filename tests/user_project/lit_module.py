"""A LightningModule as lightning-hydra-template writes one: the net as a module, the
optimizer and scheduler as partials kept in `self.hparams`, its own configure_optimizers."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torchmetrics import MeanMetric
from torchmetrics.classification.accuracy import Accuracy


class LitClassifier(L.LightningModule):
    def __init__(
        self,
        net: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=["net"])
        self.net = net
        self.criterion = torch.nn.CrossEntropyLoss()
        self.train_acc = Accuracy(task="multiclass", num_classes=num_classes)
        self.val_acc = Accuracy(task="multiclass", num_classes=num_classes)
        self.test_acc = Accuracy(task="multiclass", num_classes=num_classes)
        self.train_loss = MeanMetric()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def model_step(self, batch: tuple[torch.Tensor, torch.Tensor]):
        x, y = batch
        logits = self.forward(x)
        return self.criterion(logits, y), logits.argmax(dim=1), y

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss, preds, targets = self.model_step(batch)
        self.train_loss(loss)
        self.train_acc(preds, targets)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.val_acc(preds, targets)
        self.log("val/loss", loss, on_step=False, on_epoch=True, prog_bar=True, sync_dist=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def test_step(self, batch, batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.test_acc(preds, targets)
        self.log("test/loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        self.log("test/acc", self.test_acc, on_step=False, on_epoch=True)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.hparams.optimizer(params=self.trainer.model.parameters())
        if self.hparams.scheduler is not None:
            scheduler = self.hparams.scheduler(optimizer=optimizer)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {
                    "scheduler": scheduler,
                    "monitor": "val/loss",
                    "interval": "epoch",
                    "frequency": 1,
                },
            }
        return {"optimizer": optimizer}


class SavesEverything(LitClassifier):
    """`self.save_hyperparameters()` with nothing ignored: the net (a module) and both
    partials land in `self.hparams`, as they do in many users' modules."""

    def __init__(
        self,
        net: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
        num_classes: int = 10,
    ) -> None:
        super().__init__(net, optimizer, scheduler, num_classes)
        self.save_hyperparameters()


class ReadsTrainer(LitClassifier):
    """A training_step that reads its Trainer (`self.trainer.max_epochs`), as schedules
    written into a step do: outside a Trainer, as the memory budget runs it, it raises."""

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        progress = self.trainer.current_epoch / max(self.trainer.max_epochs or 1, 1)
        self.log("train/progress", progress, on_step=True, on_epoch=False)
        return super().training_step(batch, batch_idx)
