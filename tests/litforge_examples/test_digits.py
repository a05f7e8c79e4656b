"""The digits split: sizes, and that it depends on `split_seed` alone."""

from __future__ import annotations

import pytest
import torch

from litforge_examples.data.digits import DigitsDataModule


def _split(**kwargs) -> DigitsDataModule:
    dm = DigitsDataModule(**kwargs)
    dm.setup("fit")
    return dm


def test_default_split_sizes():
    dm = _split()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (1197, 300, 300)
    images, labels = dm.train_set.tensors
    assert images.shape == (1197, 1, 8, 8) and images.dtype == torch.float32
    assert labels.dtype == torch.long
    assert 0.0 <= images.min() and images.max() <= 1.0


def test_split_partitions_all_images():
    from sklearn.datasets import load_digits

    dm = _split()
    everything = torch.cat([s.tensors[0] for s in (dm.train_set, dm.val_set, dm.test_set)])
    expected = torch.tensor(load_digits().images / 16.0, dtype=torch.float32).unsqueeze(1)
    # The same multiset of images: unique rows with their counts, both sorted.
    for got, want in zip(_rows(everything), _rows(expected), strict=True):
        assert torch.equal(got, want)


def _rows(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.unique(images.flatten(1), dim=0, return_counts=True)


def test_same_split_seed_same_split_whatever_the_shuffle_seed():
    a = _split(split_seed=0, shuffle_seed=1)
    b = _split(split_seed=0, shuffle_seed=2)
    for name in ("train_set", "val_set", "test_set"):
        for x, y in zip(getattr(a, name).tensors, getattr(b, name).tensors, strict=True):
            assert torch.equal(x, y), name


def test_other_split_seed_other_split():
    a = _split(split_seed=0)
    b = _split(split_seed=1)
    assert not torch.equal(a.val_set.tensors[0], b.val_set.tensors[0])
    assert not torch.equal(a.test_set.tensors[0], b.test_set.tensors[0])


def test_custom_sizes_and_too_large_eval_sets():
    dm = _split(val_size=100, test_size=200)
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (1497, 100, 200)
    with pytest.raises(ValueError, match="val_size"):
        _split(val_size=900, test_size=897)


def test_setup_is_idempotent():
    dm = _split()
    train = dm.train_set
    dm.setup("test")
    assert dm.train_set is train
