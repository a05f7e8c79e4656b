"""A DataModule over shards at `url/train`, `url/val` and `url/test` (what `litforge
shards write` leaves), streamed: nothing is downloaded before the first step."""

from __future__ import annotations

from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader
from typing_extensions import Unpack

from litforge.data.loaders import LoaderArgs, SplitDataModule, at_least, train_loader
from litforge.data.shards.order import BlockOrderSampler
from litforge.data.shards.reader import ShardedDataset

SPLITS = ("train", "val", "test")


class StreamDataModule(SplitDataModule):
    """url: the directory `litforge shards write` wrote (one shard directory per split);
    cache_dir / cache_bytes: a local cache of fetched blocks, bounded (None: memory only);
    retries: attempts per read after the first, with exponential backoff."""

    def __init__(
        self,
        url: str,
        batch_size: int = 64,
        cache_dir: str | None = None,
        cache_bytes: int = 1 << 30,
        retries: int = 5,
        storage_options: dict[str, Any] | None = None,
        **loader: Unpack[LoaderArgs],  # shuffle_seed, shuffle, num_workers
    ) -> None:
        super().__init__(batch_size=batch_size, **loader)
        at_least(cache_bytes=(cache_bytes, 0), retries=(retries, 0))
        self.url = url.rstrip("/")
        # Opened here, so an unreachable URL or a missing index is one line before the
        # Trainer is built; only the small index.json is read.
        self.train_set, self.val_set, self.test_set = (
            ShardedDataset(f"{self.url}/{split}", cache_dir, cache_bytes, retries,
                           storage_options=storage_options)
            for split in SPLITS
        )  # fmt: skip

    def setup(self, stage: str | None = None) -> None:
        """Nothing to load: blocks are read as the loaders ask for them."""

    def train_dataloader(self) -> StatefulDataLoader:
        data = self.train_set
        assert isinstance(data, ShardedDataset)
        sampler = BlockOrderSampler(
            data.counts, data.index.samples_per_block, self.trainer.world_size,
            self.trainer.global_rank, self.shuffle_seed, self.shuffle,
        )  # fmt: skip
        return train_loader(
            data, self.trainer, self.batch_size, self.num_workers, self.shuffle_seed,
            self.shuffle, sampler=sampler,
        )  # fmt: skip
