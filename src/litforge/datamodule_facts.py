"""What litforge reads from a DataModule, litforge's own or a plain Lightning one: its
micro-batch size and a few training samples (for the memory budget)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch.utils._pytree import tree_leaves
from torch.utils.data import DataLoader

from litforge import hooks


def batch_size_of(datamodule: L.LightningDataModule, loader: Any = None) -> int | None:
    """Samples per step and process: `datamodule.batch_size`, else its
    `hparams.batch_size` (lightning-hydra-template's shape), else `loader.batch_size`;
    None when none of them says."""
    candidates = (
        datamodule.batch_size if isinstance(datamodule, hooks.BatchSized) else None,
        getattr(getattr(datamodule, "hparams", None), "get", lambda _: None)("batch_size"),
        getattr(loader, "batch_size", None),
    )
    return next(
        (int(v) for v in candidates if isinstance(v, int) and not isinstance(v, bool)), None
    )


def per_process_batch(trainer: L.Trainer) -> int | None:
    """Samples per step and process as the run's train loader yields them, once fit has set
    the DataModule up: a lightning-hydra-template DataModule divides its `batch_size` by
    the number of processes in `setup`, so its configured size is not what one process
    trains on. Read off the loader's batch sampler (the loader fit built, or one built here
    from `train_dataloader()` when fit has not yet), else `batch_size_of`, else the loader's
    first batch; None when nothing says."""
    loader = trainer.train_dataloader
    datamodule = trainer.datamodule
    if loader is None and datamodule is not None:
        with torch.random.fork_rng(devices=[]):
            loader = datamodule.train_dataloader()
    size = loader_batch_size(loader)
    if size is None and datamodule is not None:
        size = batch_size_of(datamodule)
    if size is None and isinstance(loader, DataLoader):
        size = _first_batch_size(loader)
    return size


def loader_batch_size(loader: Any) -> int | None:
    """The batch a DataLoader's batch sampler makes (its `batch_size`); None for a loader
    without one (an iterable dataset that batches itself, several loaders at once)."""
    sampler = getattr(loader, "batch_sampler", None)
    size = getattr(sampler, "batch_size", None)
    if size is None and sampler is None:
        size = getattr(loader, "batch_size", None)
    return int(size) if isinstance(size, int) and not isinstance(size, bool) else None


def _first_batch_size(loader: DataLoader) -> int | None:
    with torch.random.fork_rng(devices=[]):
        batch = next(iter(loader), None)
    first = next((t for t in tree_leaves(batch) if isinstance(t, torch.Tensor)), None)
    return int(first.shape[0]) if first is not None and first.dim() > 0 else None


def training_samples(datamodule: L.LightningDataModule) -> tuple[Sequence[Any], Any]:
    """(samples, loader) after `setup("fit")`: litforge's `train_set`, or, for a DataModule
    without one, the samples of one batch of its `train_dataloader()` (drawn with the RNG
    forked, so the run's data order is untouched; loader is then that loader)."""
    samples = datamodule.train_set if isinstance(datamodule, hooks.KeepsTrainSet) else None
    if samples is not None:
        return samples, None
    with torch.random.fork_rng():
        loader = datamodule.train_dataloader()
        batch = next(iter(loader))
    return unbatch(batch), loader


def unbatch(batch: Any) -> list[Any]:
    """A collated batch back into its samples (each tensor indexed along dimension 0)."""
    first = next((t for t in tree_leaves(batch) if isinstance(t, torch.Tensor)), None)
    if first is None or first.dim() == 0:
        return []
    return [
        apply_to_collection(batch, torch.Tensor, lambda t, i=i: t[i]) for i in range(len(first))
    ]
