"""A language model whose training_step reads its loss as a number (`loss.item()`), as
many users' steps do for a print or a running average."""

from __future__ import annotations

import torch

from litforge_examples.models.language_model import LanguageModel


class ReadsLoss(LanguageModel):
    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.last_loss = loss.item()
        return loss
