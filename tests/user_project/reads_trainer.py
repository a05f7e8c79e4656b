"""A LightningModule whose configure_optimizers reads its Trainer and builds its optimizer
itself, no partial in the config (an LHT-era pattern: `self.trainer.model.parameters()`)."""

from __future__ import annotations

import torch

from tests.user_project.lit_module import LitClassifier


class OptimizerFromTheTrainer(LitClassifier):
    def __init__(self, net: torch.nn.Module, lr: float = 0.05) -> None:
        super().__init__(net=net, optimizer=None, scheduler=None)  # type: ignore[arg-type]
        self.lr = lr

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.trainer.model.parameters(), lr=self.lr)
