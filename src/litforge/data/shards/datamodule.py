"""A DataModule over shards at `url/train`, `url/val` and `url/test` (what `litforge
shards write` leaves, or Parquet or WebDataset files: `litforge.data.formats`), or over a
weighted mixture of such directories, streamed: nothing is downloaded before the first
step."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import ConcatDataset
from torchdata.stateful_dataloader import StatefulDataLoader
from typing_extensions import Unpack

from litforge import console
from litforge.data.formats import Format, open_source
from litforge.data.formats.source import StreamSource
from litforge.data.loaders import LoaderArgs, SplitDataModule, at_least, train_loader
from litforge.data.shards import changed
from litforge.data.shards.audit import SampleIdLog
from litforge.data.shards.mixture import MixtureDataset, MixtureSampler
from litforge.data.shards.order import WINDOW, BlockOrderSampler, LazyOrderSampler
from litforge.errors import ConfigError, redact_url

SPLITS = ("train", "val", "test")
STREAM_KEYS = ("url", "weight", "format", "columns")  # what a data.streams entry takes


class StreamArgs(LoaderArgs, total=False):
    """StreamDataModule's keyword arguments beside url and batch_size, for a subclass that
    adds its own: `**stream: Unpack[StreamArgs]` (config validation checks them from here)."""

    streams: list[Any] | None
    format: Format | None
    columns: str | list[str] | dict[str, str] | None
    epoch_samples: int | None
    shuffle_window: int
    cache_dir: str | None
    cache_bytes: int
    readahead_bytes: int
    read_threads: int
    retries: int
    prefetch_factor: int
    record_ids: bool
    accept_changed_data: bool
    storage_options: dict[str, Any] | None


def parse_streams(url: str | None, streams: Sequence[Any] | None) -> list[tuple[str, float]]:
    """`data.url` or `data.streams=[{url, weight}, ...]` as (url, weight) pairs, or one
    line naming the key at fault."""
    if (url is None) == (streams is None):
        raise ConfigError(
            "data: give data.url (one stream) or data.streams=[{url: ..., weight: ...}, ...] "
            "(a weighted mixture), not both or neither"
        )
    if streams is None:
        return [(str(url), 1.0)]
    if isinstance(streams, str | Mapping) or not isinstance(streams, Sequence) or not streams:
        raise ConfigError("data.streams must be a non-empty list of {url: ..., weight: ...}")
    parsed: list[tuple[str, float]] = []
    seen: dict[str, int] = {}
    for i, stream in enumerate(streams):
        key = f"data.streams[{i}]"
        if not isinstance(stream, Mapping) or not isinstance(stream.get("url"), str):
            raise ConfigError(f"{key}={stream!r} must be a mapping with a url (and a weight)")
        if unknown := set(stream) - set(STREAM_KEYS):
            raise ConfigError(
                f"{key} has unknown keys {sorted(unknown)}: it takes {', '.join(STREAM_KEYS)}"
            )
        weight = stream.get("weight", 1.0)
        ok = isinstance(weight, numbers.Real) and not isinstance(weight, bool)
        if not ok or not 0 < weight < float("inf"):
            raise ConfigError(f"{key}.weight={weight!r} must be a positive number")
        url = stream["url"].rstrip("/")
        if url in seen:  # two streams of one directory: its samples drawn under two turns
            raise ConfigError(
                f"{key}.url={redact_url(url)} is listed twice (also data.streams[{seen[url]}]): "
                "list each directory once, with the weight it should have"
            )
        seen[url] = i
        parsed.append((stream["url"], float(weight)))
    return parsed


class StreamDataModule(SplitDataModule):
    """url: the directory `litforge shards write` wrote (one shard directory per split), or
    one of Parquet or WebDataset files per split (`url/train/*.parquet`, or named
    `url/train-*.parquet`; likewise val, test);
    streams: instead of url, several such directories drawn by weight (their val and test
    splits are evaluated one after another); each entry may give its own format and columns;
    format: shards, parquet or webdataset (None: shards where an index.json is, else by the
    files' suffix);
    columns: which columns (Parquet) or member extensions (WebDataset) make a sample: a name,
    a list (a tuple sample, e.g. [image, label]) or a mapping ({x: image, y: label}); None:
    every one, as a dict;
    epoch_samples: samples per training epoch of a mixture (None: every stream's size);
    shuffle_window: blocks whose samples are shuffled together (`order`); each loader
    process keeps as many decoded blocks in memory;
    cache_dir / cache_bytes: a local cache of fetched blocks, bounded (None: memory only);
    readahead_bytes: bytes of the order's next blocks each loader process fetches ahead,
    as large range requests (0: one request per block, when it is read);
    read_threads: range requests each loader process keeps in flight;
    retries: attempts per read after the first, with exponential backoff;
    prefetch_factor: training batches each loader worker reads ahead;
    record_ids: write the ids of the samples each rank trained on (`audit`);
    accept_changed_data: a resume onto training shards that are not what the checkpoint
    was reading (`changed`) continues at the next epoch's start instead of stopping."""

    def __init__(
        self,
        url: str | None = None,
        batch_size: int = 64,
        streams: list[Any] | None = None,
        format: Format | None = None,
        columns: str | list[str] | dict[str, str] | None = None,
        epoch_samples: int | None = None,
        shuffle_window: int = WINDOW,
        cache_dir: str | None = None,
        cache_bytes: int = 1 << 30,
        readahead_bytes: int = 64 << 20,
        read_threads: int = 8,
        retries: int = 5,
        prefetch_factor: int = 2,
        record_ids: bool = False,
        accept_changed_data: bool = False,
        storage_options: dict[str, Any] | None = None,
        **loader: Unpack[LoaderArgs],  # shuffle_seed, shuffle, num_workers
    ) -> None:
        super().__init__(batch_size=batch_size, **loader)
        at_least(cache_bytes=(cache_bytes, 0), retries=(retries, 0),
                 readahead_bytes=(readahead_bytes, 0), read_threads=(read_threads, 1),
                 prefetch_factor=(prefetch_factor, 1), shuffle_window=(shuffle_window, 1))  # fmt: skip
        self.shuffle_window = shuffle_window
        self.prefetch_factor = prefetch_factor
        if epoch_samples is not None:
            at_least(epoch_samples=(epoch_samples, 1))
        self.streams = parse_streams(url, streams)
        if epoch_samples is not None and len(self.streams) == 1:
            raise ConfigError(
                f"data.epoch_samples={epoch_samples} is for a mixture (data.streams); one "
                "stream's epoch is its size"
            )
        self.url = self.streams[0][0].rstrip("/")
        self.epoch_samples, self.record_ids = epoch_samples, record_ids
        self.accept_changed_data = accept_changed_data
        self._data_changed = False  # set on a resume onto other data, when accepted
        self._ids_log: SampleIdLog | None = None
        self._sampler: LazyOrderSampler | None = None
        self._audit_at = (0, 0)  # (sampler iteration, samples of it already recorded)
        # Opened here, so an unreachable URL or a missing index is one line before the
        # Trainer is built; only the small index.json files are read (Parquet: each file's
        # footer; WebDataset: its kept index, or one scan of each tar to build it).
        splits: dict[str, list[StreamSource]] = {split: [] for split in SPLITS}
        for i, (stream_url, _) in enumerate(self.streams):
            # A stream's own format and columns (data.streams[i]), else data.format/columns.
            own: Mapping[str, Any] = streams[i] if streams is not None else {}
            key = f"data.streams[{i}]" if "format" in own or "columns" in own else "data"
            for split in SPLITS:
                splits[split].append(open_source(
                    f"{stream_url.rstrip('/')}/{split}", own.get("format", format),
                    own.get("columns", columns), key, cache_dir=cache_dir,
                    cache_bytes=cache_bytes, retries=retries, storage_options=storage_options,
                    memory_blocks=shuffle_window + 1,
                    readahead_bytes=readahead_bytes, read_threads=read_threads,
                ))  # fmt: skip
        self.split_streams = splits
        if len(self.streams) == 1:
            self.train_set, self.val_set, self.test_set = (splits[s][0] for s in SPLITS)
        else:
            self.train_set = MixtureDataset(splits["train"])
            self.val_set, self.test_set = (
                ConcatDataset(splits["val"]),
                ConcatDataset(splits["test"]),
            )

    def setup(self, stage: str | None = None) -> None:
        """Nothing to load: blocks are read as the loaders ask for them."""

    def _train_record(self) -> list[dict[str, Any]]:
        one = len(self.streams) == 1
        keys = ["data.url"] if one else [f"data.streams[{i}].url" for i in range(len(self.streams))]
        return changed.record(list(zip(keys, self.split_streams["train"], strict=True)))

    def state_dict(self) -> dict[str, Any]:
        """Saved in each checkpoint: what training data the run is reading."""
        return {"train_streams": self._train_record()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """On resume, before the first step: the training data must be what the checkpoint
        was reading; a change is one line, or with accept_changed_data the restored epoch
        ends at once (the sampler skips it)."""
        trainer = self.trainer  # None: loaded by hand, not by a Trainer
        if trainer is not None and trainer.state.fn != TrainerFn.FITTING:
            return  # testing or validating a checkpoint reads no training position
        found = changed.changes(state_dict.get("train_streams"), self._train_record())
        if not found:
            return
        if not self.accept_changed_data:
            raise ConfigError(changed.refusal(found))
        console.warn(changed.accepted(found))
        self._data_changed = True

    def train_sampler(self) -> LazyOrderSampler:
        """This trainer's rank's sampler over the training stream(s)."""
        world, rank = self.trainer.world_size, self.trainer.global_rank
        data = self.train_set
        if isinstance(data, MixtureDataset):
            size = self.epoch_samples or len(data)
            weights = [weight for _, weight in self.streams]
            return MixtureSampler(data, weights, size, world, rank, self.shuffle_seed, self.shuffle,
                                  self.shuffle_window)  # fmt: skip
        assert isinstance(data, StreamSource)
        return BlockOrderSampler(data.counts, data.index.samples_per_block, world, rank,
                                 self.shuffle_seed, self.shuffle, self.shuffle_window)  # fmt: skip

    def train_dataloader(self) -> StatefulDataLoader:
        sampler = self._sampler = self.train_sampler()
        sampler.record = self.record_ids
        sampler.skip_restored_epoch = self._data_changed
        return train_loader(
            self.train_set, self.trainer, self.batch_size, self.num_workers, self.shuffle_seed,
            self.shuffle, sampler=sampler, prefetch_factor=self.prefetch_factor,
        )  # fmt: skip

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Record the ids of a training batch as it goes to the model (the sampler ran
        ahead of it by the loader's prefetch: the batch is the next `batch_size` of what it
        yielded this iteration)."""
        trainer, sampler = self.trainer, self._sampler
        if not self.record_ids or sampler is None or trainer is None or not trainer.training:
            return batch
        if self._ids_log is None:
            # At the first batch, not in train_dataloader: Lightning and litforge's checks
            # build loaders before the checkpoint's step is restored too.
            self._ids_log = SampleIdLog(trainer.default_root_dir, trainer.global_rank,
                                        trainer.world_size, trainer.global_step)  # fmt: skip
        iteration, done = self._audit_at
        if iteration != sampler.iteration:
            iteration, done = sampler.iteration, 0
        indices = sampler.yielded[done : done + self.batch_size]
        self._audit_at = (iteration, done + len(indices))
        locate = self.train_set.locate  # type: ignore[union-attr]
        self._ids_log.append(trainer.global_step, trainer.current_epoch, map(locate, indices))
        return batch

    def teardown(self, stage: str | None = None) -> None:
        if self._ids_log is not None:
            self._ids_log.close()
            self._ids_log = None
