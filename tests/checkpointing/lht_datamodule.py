"""lightning-hydra-template's DataModule as it ships: `batch_size` is the batch of all
processes together, divided by the world size in `setup`, and the loaders use the result."""

from __future__ import annotations

from torch.utils.data import DataLoader

from tests.user_project.datamodule import DigitsDataModule


class DividingDigits(DigitsDataModule):
    def setup(self, stage: str | None = None) -> None:
        if self.trainer is not None:
            if self.hparams.batch_size % self.trainer.world_size != 0:
                raise RuntimeError(
                    f"Batch size ({self.hparams.batch_size}) is not divisible by the number of "
                    f"devices ({self.trainer.world_size})."
                )
            self.batch_size_per_device = self.hparams.batch_size // self.trainer.world_size
        super().setup(stage)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data_train, batch_size=self.batch_size_per_device, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data_val, batch_size=self.batch_size_per_device, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.data_test, batch_size=self.batch_size_per_device, shuffle=False)
