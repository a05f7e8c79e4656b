"""A sharded dataset at an fsspec URL as a map-style dataset that fetches only the blocks
asked for (one range request each), through a small in-memory LRU and a bounded disk
cache. Nothing is downloaded up front: a fresh machine reads its first block at once.

Store errors are retried with exponential backoff; after the last attempt the run stops
with one line (`DataStoreUnreachable`, an interruption: the same command continues from
the last completed checkpoint).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import time
from collections import OrderedDict
from typing import Any

import fsspec
from torch.utils.data import Dataset

from litforge.data.shards import format as fmt
from litforge.data.shards.cache import BlockCache
from litforge.errors import STORE_ADVICE, ConfigError, LitforgeError, redact_url
from litforge.extras import missing_extra


class DataStoreUnreachable(LitforgeError):
    """Reading the data store failed after every retry."""

    exit_code = 75


def _one_try(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """On S3, one attempt per read in botocore (unless the options say otherwise):
    the reader retries with its own backoff, and a dead endpoint is one line in seconds,
    not after both libraries' retries (measured: 27 s for a refused port)."""
    if not url.startswith(("s3://", "s3a://")):
        return options
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("retries", {"max_attempts": 1})
    config.setdefault("connect_timeout", 10)
    return {**options, "config_kwargs": config}


def stall_advice(where: str, cache_dir: str | None, per_block: int) -> str:
    cache = (
        f"data.cache_dir={cache_dir} holds too little? raise data.cache_bytes"
        if cache_dir
        else "data.cache_dir=/local/disk (with data.cache_bytes) keeps fetched blocks for the "
        "next epochs and a restart"
    )
    return (
        f"The data is streamed from {where}: data.num_workers=N fetches blocks in parallel "
        f"and data.prefetch_factor=K reads K batches ahead per worker; {cache}; fewer, larger "
        f"reads: litforge shards write --samples-per-block (now {per_block})"
    )


class ShardedDataset(Dataset):
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
    ) -> None:
        self.memory_blocks = memory_blocks  # decoded blocks kept: a shuffle window's, and one
        self.url, self.cache_dir, self.cache_bytes = url, cache_dir, cache_bytes
        self.retries, self.backoff_s = retries, backoff_s
        self.storage_options = _one_try(url, dict(storage_options or {}))
        self._fs: Any = None
        self._fs_pid = 0
        self._headers: dict[int, list[int]] = {}
        self._blocks: OrderedDict[tuple[int, int], list[Any]] = OrderedDict()
        self._cache: BlockCache | None = None
        self.index = self._read_index()
        self.counts = [s.samples for s in self.index.shards]
        self.starts = list(itertools.accumulate([0, *self.counts]))
        self._url_key = hashlib.sha256(url.encode()).hexdigest()[:16]

    # -- the store --------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:  # to DataLoader workers: no live connection
        return {**self.__dict__, "_fs": None, "_blocks": OrderedDict(), "_cache": None}

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
               retries: int | None = None, before_training: bool = False) -> bytes:  # fmt: skip
        """`name`'s bytes (a range of them), retried; `before_training`: the failure's
        message says no checkpoint to resume from (there is none yet)."""
        retries = self.retries if retries is None else retries
        resume = "" if before_training else "; the same command resumes from the last checkpoint"
        for attempt in range(retries + 1):
            try:
                return self.fs.cat_file(self._path(name), start=start, end=end)
            except FileNotFoundError:
                raise
            except Exception as err:  # noqa: BLE001 - a store's errors have no common type
                refused = isinstance(err, PermissionError) or "credentials" in str(err).lower()
                if attempt == retries or refused:  # a refusal does not pass with waiting
                    raise DataStoreUnreachable(
                        f"data.url={redact_url(self.url)}: reading {name} failed "
                        f"{attempt + 1} time(s) ({type(err).__name__}: "
                        f"{str(err).splitlines()[0] if str(err) else ''}){resume}. " + STORE_ADVICE
                    ) from None
                time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def _read_index(self) -> fmt.Index:
        where = f"data.url={redact_url(self.url)}"
        try:
            # Before training: a short retry, so a wrong endpoint is one line in seconds.
            raw = self._fetch(fmt.INDEX, retries=min(self.retries, 2), before_training=True)
        except FileNotFoundError:
            raise ConfigError(
                f"{where}: no {fmt.INDEX} there: not a shard directory, or its writing did "
                "not finish (write it with `litforge shards write`)"
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
        except ValueError:
            raise ConfigError(f"{where}: {fmt.INDEX} is not JSON") from None
        return fmt.Index.from_json(record, where)

    # -- samples ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < len(self):
            raise IndexError(index)
        shard = bisect.bisect_right(self.starts, index) - 1
        within = index - self.starts[shard]
        per = self.index.samples_per_block
        return self._block(shard, within // per)[within % per]

    def stall_advice(self) -> str:
        """The streaming knobs, for the data-wait warning."""
        return stall_advice(redact_url(self.url), self.cache_dir, self.index.samples_per_block)

    def locate(self, index: int) -> tuple[str, int]:
        """Sample `index`'s shard (its URL, credentials cut) and place in that shard."""
        shard = bisect.bisect_right(self.starts, index) - 1
        return f"{redact_url(self.url)}/{self.index.shards[shard].name}", index - self.starts[shard]

    def _block(self, shard: int, block: int) -> list[Any]:
        key = (shard, block)
        if key in self._blocks:
            self._blocks.move_to_end(key)
            return self._blocks[key]
        data = self._block_bytes(shard, block)
        samples = fmt.decode_block(data)
        self._blocks[key] = samples
        if len(self._blocks) > self.memory_blocks:
            self._blocks.popitem(last=False)
        return samples

    def _block_bytes(self, shard: int, block: int) -> bytes:
        name = self.index.shards[shard].name
        cache = self._disk_cache()
        key = f"{self._url_key}-{name}-{block}"  # datasets may share one cache directory
        if cache is not None and (hit := cache.get(key)) is not None:
            return hit
        offsets = self._header(shard)
        data = self._fetch(name, offsets[block], offsets[block + 1])
        if cache is not None:
            cache.put(key, data)
        return data

    def _header(self, shard: int) -> list[int]:
        if shard not in self._headers:
            name = self.index.shards[shard].name
            size = fmt.header_size(self._fetch(name, 0, fmt.HEAD_SIZE))
            self._headers[shard] = fmt.block_offsets(self._fetch(name, 0, size))
        return self._headers[shard]

    def _disk_cache(self) -> BlockCache | None:
        if self.cache_dir is None:
            return None
        if self._cache is None:
            self._cache = BlockCache(self.cache_dir, self.cache_bytes)
        return self._cache
