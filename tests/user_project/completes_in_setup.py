"""A LightningModule that completes itself in `setup()` from its DataModule, Lightning's
place for what depends on the data: it centres its inputs on the training split's mean."""

from __future__ import annotations

import torch

from tests.user_project.lit_module import LitClassifier


class CentredByTheData(LitClassifier):
    mean: torch.Tensor | None = None

    def setup(self, stage: str) -> None:
        if self.mean is None:
            images = [x for x, _ in self.trainer.datamodule.data_train]
            self.mean = torch.stack(images).mean()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x - self.mean)
