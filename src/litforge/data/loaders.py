"""DataLoader construction and the constructor arguments shared by the DataModules."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from typing_extensions import TypedDict

from litforge.data.global_order import GlobalOrderSampler
from litforge.errors import ConfigError


class ResumableLoader(StatefulDataLoader):
    """A StatefulDataLoader whose saved state also loads into another number of workers.

    torchdata keeps a multiprocess loader's state as one snapshot per worker and refuses
    a state saved with another layout ("State doesn't contain key '_snapshot'", or a
    worker-count assertion). litforge's datasets keep no state of their own: the sampler's
    position is all there is. So across layouts only the sampler's state is loaded, and
    the next iteration starts from that position.
    """

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        snapshot = state_dict.get("_snapshot")
        main = snapshot["_main_snapshot"] if snapshot else state_dict
        saved_workers = main.get("_num_workers", 0) if snapshot else 0
        if saved_workers == self.num_workers:
            super().load_state_dict(state_dict)
            return
        sampler_state = (main.get("_sampler_iter_state") or {}).get("sampler_state")
        if sampler_state is None or not hasattr(self.sampler, "load_state_dict"):
            super().load_state_dict(state_dict)  # torchdata says what does not fit
            return
        self.sampler.load_state_dict(sampler_state)


def train_loader(
    dataset: Dataset,
    trainer: L.Trainer,
    batch_size: int,
    num_workers: int,
    seed: int,
    shuffle: bool = True,
    sampler: GlobalOrderSampler | None = None,
    prefetch_factor: int | None = None,
) -> ResumableLoader:
    """A resumable, shuffling loader whose order depends only on `seed` and the epoch.

    Reads `world_size`, `global_rank` and `current_epoch` from `trainer`. The sampler is
    a `GlobalOrderSampler` (`litforge.data.global_order`: DistributedSampler's order, and a
    position that survives another number of processes or micro-batch) even in a single
    process: Lightning calls its `set_epoch` each epoch and, because the DataModule built
    it, leaves it alone under DDP (Lightning's own sampler wrapper does not resume to the
    same order). The `StatefulDataLoader` saves and restores the sampler's position. An
    epoch repeats no sample: its rest beyond a multiple of the processes is dropped.
    `sampler`: another order with the same position rules (a sharded dataset's
    `BlockOrderSampler`), built for this trainer's world. `prefetch_factor`: batches
    each worker reads ahead (None: PyTorch's 2; only with workers).
    """
    sampler = sampler or GlobalOrderSampler(
        len(dataset),  # type: ignore[arg-type]
        num_replicas=trainer.world_size,
        rank=trainer.global_rank,
        seed=seed,
        shuffle=shuffle,
    )
    if len(sampler) == 0:  # an epoch with nothing to train: Lightning would skip fit silently
        raise ConfigError(
            f"the training data has {sampler.size} sample(s) per epoch, fewer than the "
            f"{sampler.num_replicas} processes: each process needs at least one (an epoch's "
            "rest that does not divide by the processes is dropped, never repeated)"
        )
    # A resumed run replays the saved position as soon as the loader is built, before
    # Lightning's own set_epoch call: the sampler must already hold the resumed epoch.
    sampler.set_epoch(trainer.current_epoch)
    return ResumableLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
        generator=own_generator(seed),
    )


def own_generator(seed: int) -> torch.Generator:
    """The generator a loader draws its workers' base seed from.

    Without one, each new iterator draws it from the global RNG, which dropout and the
    model's other random draws use too. A persistent multi-worker loader makes one
    iterator per run, a single-process loader one per epoch: the same run with
    `num_workers=0` and `num_workers=1` then ended with different weights.
    """
    return torch.Generator().manual_seed(seed)


def eval_loader(dataset: Dataset, batch_size: int, num_workers: int) -> StatefulDataLoader:
    """In order, not sharded: every rank sees the whole (small) evaluation set, so metrics
    need no padding correction; torchmetrics syncs them across ranks."""
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=num_workers,
        generator=own_generator(0),  # not the global RNG: validating draws none of it
    )


def at_least(**checked: tuple[int, int]) -> None:
    """`name=(value, lowest)`: a ValueError for the first value below its lowest."""
    for name, (value, lowest) in checked.items():
        if value < lowest:
            raise ValueError(f"{name}={value} must be >= {lowest}")


class LoaderArgs(TypedDict, total=False):
    """The loader settings every SplitDataModule takes beside `batch_size` (config keys
    `data.NAME`). A subclass hands them on in one form, `**loader: Unpack[LoaderArgs]`
    (PEP 692), and config validation checks them by name and type from here."""

    shuffle_seed: int  # the train order's seed (GlobalOrderSampler), >= 0
    shuffle: bool
    num_workers: int  # >= 0


class SplitDataModule(L.LightningDataModule):
    """Loaders over `train_set`, `val_set` and `test_set`, which a subclass's `setup` fills."""

    # Its train loader builds its own sampler: Lightning must not replace it
    # (litforge.build reads this for trainer.use_distributed_sampler=null). This and
    # `train_set`, `batch_size` are hooks a plain DataModule may define too (litforge.hooks).
    shards_itself = True

    train_set: Dataset | None = None
    val_set: Dataset | None = None
    test_set: Dataset | None = None

    def __init__(
        self, *, batch_size: int, shuffle_seed: int = 0, shuffle: bool = True, num_workers: int = 0
    ) -> None:
        super().__init__()
        at_least(
            batch_size=(batch_size, 1), shuffle_seed=(shuffle_seed, 0), num_workers=(num_workers, 0)
        )
        self.batch_size = batch_size
        self.shuffle_seed = shuffle_seed
        self.shuffle = shuffle
        self.num_workers = num_workers

    def train_dataloader(self) -> StatefulDataLoader:
        return train_loader(
            self.train_set,
            self.trainer,
            self.batch_size,
            self.num_workers,
            self.shuffle_seed,
            self.shuffle,
        )

    def val_dataloader(self) -> StatefulDataLoader:
        return eval_loader(self.val_set, self.batch_size, self.num_workers)

    def test_dataloader(self) -> StatefulDataLoader:
        return eval_loader(self.test_set, self.batch_size, self.num_workers)
