"""A LightningDataModule as lightning-hydra-template writes one: `data_train`, `data_val`,
`data_test` and `self.hparams.batch_size`, plain DataLoaders, no sampler of its own."""

from __future__ import annotations

import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, Dataset, random_split


class Digits(Dataset):
    """sklearn's bundled digits as ((1, 8, 8) image, label)."""

    def __init__(self) -> None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        self.images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
        self.labels = torch.tensor(digits.target, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.images[i], self.labels[i]


class DigitsDataModule(LightningDataModule):
    def __init__(
        self,
        train_val_test_split: tuple[int, int, int] = (1197, 300, 300),
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.data_train: Dataset | None = None
        self.data_val: Dataset | None = None
        self.data_test: Dataset | None = None

    def setup(self, stage: str | None = None) -> None:
        if not self.data_train and not self.data_val and not self.data_test:
            dataset = Digits()
            self.data_train, self.data_val, self.data_test = random_split(
                dataset,
                lengths=self.hparams.train_val_test_split,
                generator=torch.Generator().manual_seed(42),
            )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.data_train,
            batch_size=self.hparams.batch_size,
            num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
            shuffle=True,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data_val, batch_size=self.hparams.batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.data_test, batch_size=self.hparams.batch_size, shuffle=False)
