"""What litforge reads from a DataModule, litforge's own or a plain Lightning one: its
micro-batch size and a few training samples (for the memory budget)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch.utils._pytree import tree_leaves


def batch_size_of(datamodule: L.LightningDataModule, loader: Any = None) -> int | None:
    """Samples per step and process: `datamodule.batch_size`, else its
    `hparams.batch_size` (lightning-hydra-template's shape), else `loader.batch_size`;
    None when none of them says."""
    candidates = (
        getattr(datamodule, "batch_size", None),
        getattr(getattr(datamodule, "hparams", None), "get", lambda _: None)("batch_size"),
        getattr(loader, "batch_size", None),
    )
    return next(
        (int(v) for v in candidates if isinstance(v, int) and not isinstance(v, bool)), None
    )


def training_samples(datamodule: L.LightningDataModule) -> tuple[Sequence[Any], Any]:
    """(samples, loader) after `setup("fit")`: litforge's `train_set`, or, for a DataModule
    without one, the samples of one batch of its `train_dataloader()` (drawn with the RNG
    forked, so the run's data order is untouched; loader is then that loader)."""
    samples = getattr(datamodule, "train_set", None)
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
