"""A LightningModule that keeps a nested config node and reads it by attribute, as
lightning-hydra-template code does (`self.hparams.loss.name`), in `__init__` and after fit."""

from __future__ import annotations

from typing import Any

import torch

from tests.user_project.lit_module import LitClassifier


class ReadsNestedConfig(LitClassifier):
    def __init__(self, loss: Any, **rest: Any) -> None:
        super().__init__(**rest)
        self.save_hyperparameters(logger=False, ignore=["net"])
        smoothing = self.hparams.loss.label_smoothing  # a DictConfig, as Hydra delivers it
        self.criterion = torch.nn.CrossEntropyLoss(label_smoothing=smoothing)
        self.loss_name_after_fit: str | None = None

    def on_fit_end(self) -> None:
        self.loss_name_after_fit = self.hparams.loss.name
