"""Image classification: cross-entropy loss and accuracy around a net that maps images to
class logits (conf/model/cnn.yaml: `litforge_examples.nets.cnn.CNN`)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torchmetrics.classification import MulticlassAccuracy

from litforge import LitforgeModule, OptimizerFactory, SchedulerFactory


class Classifier(LitforgeModule):
    """net: images -> logits; num_classes: its number of outputs (None: `net.num_classes`).
    optimizer, scheduler, scheduler_interval: see `LitforgeModule`."""

    consumes = "labelled images"  # checked against the DataModule's `provides` before building

    def __init__(
        self,
        net: nn.Module,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        scheduler_interval: str = "step",
        num_classes: int | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=["net"])
        self.net = net
        classes = num_classes if num_classes is not None else getattr(net, "num_classes", None)
        if not isinstance(classes, int) or classes < 2:
            raise ValueError(
                f"num_classes={classes}: give the net's number of classes (an integer >= 2), "
                "or a net with a num_classes attribute"
            )
        self.train_acc = MulticlassAccuracy(classes, average="micro")
        self.val_acc = MulticlassAccuracy(classes, average="micro")
        self.test_acc = MulticlassAccuracy(classes, average="micro")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def _step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str, acc) -> torch.Tensor:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits.float(), labels)
        acc.update(logits, labels)
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=True, sync_dist=True)
        if stage != "train":
            self.log(f"{stage}/acc", acc, on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train", self.train_acc)

    def on_train_epoch_end(self) -> None:
        # Logged once an epoch, not as a Metric object every step: Lightning's per-call
        # handling of a logged Metric was the largest share of the CNN's per-step overhead.
        # No updates: a run resumed from a checkpoint taken at this epoch's end, where
        # Lightning calls this hook again with fresh metric state; there is nothing to report.
        if self.train_acc.update_count:
            # compute() already syncs across ranks, so every rank logs the same value; the
            # mean that sync_dist takes changes nothing and keeps Lightning from warning.
            self.log("train/acc", self.train_acc.compute(), sync_dist=True)
        self.train_acc.reset()

    def validation_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "val", self.val_acc)

    def test_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "test", self.test_acc)
