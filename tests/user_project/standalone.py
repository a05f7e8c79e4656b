"""A LightningModule and DataModule on the standalone `pytorch_lightning` package
(`import pytorch_lightning as pl`), as many Lightning projects are written."""

from __future__ import annotations

import pytorch_lightning as pl
import torch


class StandaloneModule(pl.LightningModule):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(width, 1)


class StandaloneData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size
