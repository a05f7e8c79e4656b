"""scikit-learn's bundled 8x8 handwritten digits (1,797 images, no download)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import TensorDataset
from typing_extensions import Unpack

from litforge import ConfigError, LoaderArgs, SplitDataModule, StreamDataModule, at_least

N_IMAGES = 1797  # len(sklearn.datasets.load_digits().target)


class DigitsDataModule(SplitDataModule):
    """Fixed train/val/test split of `sklearn.datasets.load_digits`.

    The split comes from `split_seed` alone, so it never changes with the training seed.
    Pixel values 0..16 are scaled to 0..1; images are (1, 8, 8) float tensors.
    """

    provides = "labelled images"

    def __init__(
        self,
        batch_size: int = 64,
        val_size: int = 300,
        test_size: int = 300,
        split_seed: int = 0,
        **loader: Unpack[LoaderArgs],  # shuffle_seed, shuffle, num_workers
    ) -> None:
        super().__init__(batch_size=batch_size, **loader)
        at_least(val_size=(val_size, 1), test_size=(test_size, 1), split_seed=(split_seed, 0))
        if val_size + test_size >= N_IMAGES:
            raise ConfigError(
                f"data.val_size={val_size} + data.test_size={test_size} leave no training "
                f"images; their sum must be < {N_IMAGES}"
            )
        self.val_size = val_size
        self.test_size = test_size
        self.split_seed = split_seed

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        from sklearn.datasets import load_digits  # heavy import kept out of config composition

        digits = load_digits()
        images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
        labels = torch.tensor(digits.target, dtype=torch.long)
        order = np.random.default_rng(self.split_seed).permutation(len(labels))
        n_test, n_val = self.test_size, self.val_size
        test, val, train = np.split(order, [n_test, n_test + n_val])
        self.train_set = TensorDataset(images[train], labels[train])
        self.val_set = TensorDataset(images[val], labels[val])
        self.test_set = TensorDataset(images[test], labels[test])


class DigitsStream(StreamDataModule):
    """The digits splits streamed from shards (`litforge shards write data=digits --url URL`)."""

    provides = "labelled images"
