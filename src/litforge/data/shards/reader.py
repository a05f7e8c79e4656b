"""A sharded dataset at an fsspec URL as a map-style dataset that fetches only the blocks
asked for, through a small in-memory LRU and a bounded disk cache. Nothing is downloaded
up front: a fresh machine reads its first block at once. Read in a sampler's order (its
indices carry their plan, `order.Planned`), the next blocks are read ahead in the
background as large range requests (`readahead`); an index without a plan reads its block
with one range request.

Store errors are retried with exponential backoff; after the last attempt the run stops
with one line (`DataStoreUnreachable`, an interruption: the same command continues from
the last completed checkpoint). A damaged file is not an outage: the index and each shard's
header are checked against each other and every block against its digest (`format`), and
a fault is one line naming the file's URL (`DamagedShards`), not retried.
"""

from __future__ import annotations

import bisect
import errno
import hashlib
import itertools
import json
import os
from collections import OrderedDict
from typing import Any

import fsspec
from torch.utils.data import Dataset

from litforge.data.shards import format as fmt
from litforge.data.shards.access import one_try as _one_try
from litforge.data.shards.access import retried, stall_advice
from litforge.data.shards.cache import BlockCache
from litforge.data.shards.faults import DamagedShards, DataStoreUnreachable
from litforge.data.shards.ranges import ShardRanges
from litforge.data.shards.readahead import ReadsAhead
from litforge.errors import ConfigError, redact_url
from litforge.extras import missing_extra

__all__ = ["DamagedShards", "DataStoreUnreachable", "ShardedDataset"]
HEADER_READ = 64 << 10  # bytes of a shard's first read: its header, whole in most shards


class _PastTheEnd(Exception):
    """A range read that starts past the file's end (s3fs: EINVAL, "range not satisfiable")."""


def _range_damage(err: Exception) -> Exception | None:
    """A range read that starts past the file's end is damage, not an outage."""
    past = isinstance(err, OSError) and err.errno == errno.EINVAL and "range" in str(err).lower()
    return _PastTheEnd() if past else None


class ShardedDataset(ShardRanges, ReadsAhead, Dataset):
    """The samples of the shards at `url` (written by `write_shards`), by global index."""

    def __init__(
        self,
        url: str,
        cache_dir: str | None = None,
        cache_bytes: int = 1 << 30,
        retries: int = 5,
        backoff_s: float = 0.5,
        storage_options: dict[str, Any] | None = None,
        memory_blocks: int = 65,
        readahead_bytes: int = 64 << 20,
        read_threads: int = 8,
    ) -> None:
        self.memory_blocks = memory_blocks  # decoded blocks kept: a shuffle window's, and one
        # Bytes of the order's next blocks fetched ahead and not yet read (0: none, each
        # block is its own request), on read_threads concurrent range requests.
        self.readahead_bytes, self.read_threads = readahead_bytes, read_threads
        self.url, self.cache_dir, self.cache_bytes = url, cache_dir, cache_bytes
        self.retries, self.backoff_s = retries, backoff_s
        self.storage_options = _one_try(url, dict(storage_options or {}))
        self._fs: Any = None
        self._fs_pid = 0
        self._headers: dict[int, tuple[list[int], list[bytes]]] = {}  # offsets, digests
        self._blocks: OrderedDict[tuple[int, int], list[Any]] = OrderedDict()
        self.index = self._read_index()
        self.counts = [s.samples for s in self.index.shards]
        self.starts = list(itertools.accumulate([0, *self.counts]))
        # Cached blocks are this URL's as of this index: a dataset rewritten in place
        # never gets the old one's bytes (and each block is checked against its digest).
        self._cache_key = hashlib.sha256(f"{url}\n{self.fingerprint}".encode()).hexdigest()[:16]
        # Opened here, in the main process: a cache_dir that cannot be written is one
        # warning before training, and the loader workers inherit the verdict.
        self._cache = BlockCache(cache_dir, cache_bytes) if cache_dir is not None else None

    # -- the store --------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:  # to DataLoader workers: no live connection
        return {**self.__dict__, "_fs": None, "_blocks": OrderedDict(), "_ahead": None}

    @property
    def fs(self) -> Any:
        # One filesystem per process, never fsspec's shared instance: a forked loader
        # worker inherits the parent's, and s3fs's event loop is not fork-safe.
        if self._fs is None or self._fs_pid != os.getpid():
            self._fs, self._root = fsspec.core.url_to_fs(
                self.url, skip_instance_cache=True, **self.storage_options
            )
            self._fs_pid = os.getpid()
        return self._fs

    def _path(self, name: str) -> str:
        self.fs  # noqa: B018 - sets _root
        return f"{self._root.rstrip('/')}/{name}"

    def _fetch(self, name: str, start: int | None = None, end: int | None = None,
               retries: int | None = None, before_training: bool = False,
               size: bool = False) -> Any:  # fmt: skip
        """`name`'s bytes (a range of them; `size`: its size in bytes), retried;
        `before_training`: the failure's message says no checkpoint to resume from."""
        path = self._path(name)

        def attempt() -> Any:
            return self.fs.size(path) if size else self.fs.cat_file(path, start=start, end=end)

        return retried(attempt, f"reading {name}", self.url,
                       self.retries if retries is None else retries, self.backoff_s,
                       before_training, damage=_range_damage)  # fmt: skip

    def _read_index(self) -> fmt.Index:
        where = f"data.url={redact_url(self.url)}"
        index_url = f"{redact_url(self.url).rstrip('/')}/{fmt.INDEX}"
        try:
            # Before training: a short retry, so a wrong endpoint is one line in seconds.
            raw = self._fetch(fmt.INDEX, retries=min(self.retries, 2), before_training=True)
        except FileNotFoundError:
            raise ConfigError(
                f"{where}: no {fmt.INDEX} there ({index_url}): not a shard directory, or its "
                "writing did not finish (write it with `litforge shards write`)"
            ) from None
        except DataStoreUnreachable as err:
            raise ConfigError(str(err)) from None
        except Exception as err:  # noqa: BLE001 - an unknown protocol, a missing package
            extra = missing_extra(err)
            raise ConfigError(
                f"{where}: {extra}" if extra else
                f"{where} is not a usable URL ({type(err).__name__}: {err}). Give a local path "
                "or an fsspec URL such as s3://bucket/prefix (needs s3fs), gs://... (gcsfs)"
            ) from None  # fmt: skip
        # What data this is, as read: a resume checks it, and cached blocks are keyed on it.
        self.fingerprint: str = hashlib.sha256(raw).hexdigest()
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            raise DamagedShards(f"{index_url}: damaged: not JSON; {fmt.REWRITE}") from None
        try:
            return fmt.Index.from_json(record, index_url)
        except ConfigError as err:
            raise DamagedShards(str(err)) from None

    # -- samples ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < len(self):
            raise IndexError(index)
        shard = bisect.bisect_right(self.starts, index) - 1
        within = int(index) - self.starts[shard]  # (int: a Planned index's plan stays below)
        per = self.index.samples_per_block
        return self._block(shard, within // per, index)[within % per]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """A batch's samples (the DataLoader's fetcher asks for a batch at once): each
        block is looked up once per batch, not once per sample."""
        per, starts, size = self.index.samples_per_block, self.starts, len(self)
        blocks: dict[tuple[int, int], tuple[int, list[Any]]] = {}  # -> (first index, samples)
        out = []
        for index in indices:
            if not 0 <= index < size:
                raise IndexError(index)
            shard = bisect.bisect_right(starts, index) - 1
            block = (int(index) - starts[shard]) // per
            got = blocks.get((shard, block))
            if got is None:
                got = (starts[shard] + block * per, self._block(shard, block, index))
                blocks[(shard, block)] = got
            out.append(got[1][int(index) - got[0]])
        return out

    def stall_advice(self) -> str:
        """The streaming knobs, for the data-wait warning (litforge.hooks.AdvisesOnStalls)."""
        return stall_advice(redact_url(self.url), self.cache_dir, self.index.samples_per_block)

    def locate(self, index: int) -> tuple[str, int]:
        """Sample `index`'s shard (its URL, credentials cut) and place in that shard."""
        shard = bisect.bisect_right(self.starts, index) - 1
        return f"{redact_url(self.url)}/{self.index.shards[shard].name}", index - self.starts[shard]

    def _block(self, shard: int, block: int, index: int | None = None) -> list[Any]:
        key = (shard, block)
        if key in self._blocks:
            self._blocks.move_to_end(key)
            return self._blocks[key]
        info, per = self.index.shards[shard], self.index.samples_per_block
        data = self._read_ahead(shard, block, index) or self._block_bytes(shard, block)
        try:
            samples = fmt.decode_block(data, min(per, info.samples - block * per))
        except fmt.Damaged as err:
            raise self._damaged(info.name, f"block {block}: {err}") from None
        self._blocks[key] = samples
        if len(self._blocks) > self.memory_blocks:
            self._blocks.popitem(last=False)
        return samples

    def _damaged(self, name: str, what: str) -> DamagedShards:
        return DamagedShards(
            f"{redact_url(self.url).rstrip('/')}/{name}: damaged: {what}; {fmt.REWRITE}"
        )

    def _block_key(self, shard: int, block: int) -> str:
        # Datasets may share one cache directory: keyed on the URL and index bytes too.
        return f"{self._cache_key}-{self.index.shards[shard].name}-{block}"

    def _header_key(self, shard: int) -> str:
        return f"{self._cache_key}-{self.index.shards[shard].name}-header"

    def _block_bytes(self, shard: int, block: int) -> bytes:
        """Block `block` of `shard`, from the disk cache or the store, as its digest says."""
        name = self.index.shards[shard].name
        offsets, digests = self._header(shard)
        start, end, digest = offsets[block], offsets[block + 1], digests[block]
        key = self._block_key(shard, block)
        if self._cache is not None and (hit := self._cache.get(key)) is not None:
            try:
                fmt.check_block(hit, block, start, end, digest)
                return hit
            except fmt.Damaged:  # another writer's, or a damaged disk: fetched again
                self._cache.drop(key)
        data = self._shard_bytes(shard, start, end)
        try:
            fmt.check_block(data, block, start, end, digest)
        except fmt.Damaged as err:
            raise self._damaged(name, str(err)) from None
        if self._cache is not None:
            self._cache.put(key, data)
        return data

    def _shard_bytes(self, shard: int, start: int | None = None, end: int | None = None,
                     size: bool = False) -> Any:  # fmt: skip
        name = self.index.shards[shard].name
        index_url = f"{redact_url(self.url).rstrip('/')}/{fmt.INDEX}"
        try:
            return self._fetch(name, start, end, size=size)
        except FileNotFoundError:
            raise self._damaged(name, f"listed in {index_url} but not there (deleted?)") from None
        except _PastTheEnd:
            raise self._damaged(name, f"it ends before byte {start} (truncated?)") from None

    def _header(self, shard: int) -> tuple[list[int], list[bytes]]:
        """Shard `shard`'s block offsets and digests, once its size and header agree with
        the index; from the disk cache when it holds them (a warm cache reads nothing
        from the store)."""
        if shard in self._headers:
            return self._headers[shard]
        info = self.index.shards[shard]
        index_url = f"{redact_url(self.url).rstrip('/')}/{fmt.INDEX}"
        per_block, key = self.index.samples_per_block, self._header_key(shard)
        if self._cache is not None and (hit := self._cache.get(key)) is not None:
            try:
                self._headers[shard] = fmt.parse_header(hit, info, per_block, index_url)
                return self._headers[shard]
            except fmt.Damaged:  # another writer's, or a damaged disk: read again
                self._cache.drop(key)
        size = self._shard_bytes(shard, size=True)
        if size != info.bytes:
            state = "empty" if size == 0 else f"{size} bytes"
            raise self._damaged(info.name, f"{state}, {index_url} says {info.bytes} (truncated?)")
        try:
            # One read that holds the whole header of up to ~2,700 blocks; a longer one
            # takes a second (each request to a store waits its round trip).
            first = self._shard_bytes(shard, 0, min(info.bytes, HEADER_READ))
            length = fmt.header_size(first[: fmt.HEAD_SIZE], info, per_block, index_url)
            raw = first[:length] if length <= len(first) else self._shard_bytes(shard, 0, length)
            header = fmt.parse_header(raw, info, per_block, index_url)
        except fmt.Damaged as err:
            raise self._damaged(info.name, str(err)) from None
        if self._cache is not None:
            self._cache.put(key, raw)
        self._headers[shard] = header
        return header
