"""The part every reader of files at an fsspec URL shares: one filesystem per process,
reads retried with backoff (then `DataStoreUnreachable`, an outage the same command
resumes from), the files of a split found by listing, damage named in one line
(`DamagedShards`), and the samples by global index through a small LRU of decoded blocks.

A reader (Parquet, WebDataset) adds how its files' blocks are found and decoded:
`_decode(file, block)`.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fsspec
from torch.utils.data import Dataset

from litforge.data.formats.source import FileLayout
from litforge.data.shards.access import one_try as _one_try
from litforge.data.shards.access import retried, stall_advice
from litforge.data.shards.blocks import Damaged
from litforge.data.shards.cache import BlockCache
from litforge.data.shards.faults import DamagedShards, DataStoreUnreachable
from litforge.data.shards.readahead import ReadsAhead
from litforge.errors import ConfigError, redact_url
from litforge.extras import missing_extra

# A split's files may also lie beside each other under one prefix, as the Hugging Face
# hub keeps them (data/train-00000-of-00002.parquet): its names start with one of these.
PREFIXES = {"train": ("train",), "val": ("val", "validation", "valid"), "test": ("test",)}


@dataclass(frozen=True)
class Listed:
    name: str  # beside the others in `FileDataset.directory`
    bytes: int
    stamp: str  # what the store says changes with the content (ETag, mtime): "" unknown


def _stamp(entry: dict[str, Any]) -> str:
    for key in ("ETag", "etag", "md5Hash", "mtime", "LastModified", "last_modified"):
        if entry.get(key) is not None:
            return str(entry[key]).strip('"')
    return ""


class FileDataset(ReadsAhead, Dataset):
    """The samples of the files of one format at `url` (a directory, or a prefix of file
    names such as `URL/train` for `URL/train-00000.parquet`), by global index."""

    suffix = ""  # the files' name ending, e.g. ".parquet"
    advice = ""  # what to do about a damaged file
    block_advice = ""  # how the files' blocks get larger

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
        self.url = url.rstrip("/")
        self.cache_dir, self.cache_bytes, self.memory_blocks = cache_dir, cache_bytes, memory_blocks
        self.retries, self.backoff_s = retries, backoff_s
        self.storage_options = _one_try(url, dict(storage_options or {}))
        self._fs: Any = None
        self._fs_pid = 0
        self._blocks: OrderedDict[tuple[int, int], list[Any]] = OrderedDict()
        self.directory, self.files = self._list()
        self._cache = BlockCache(cache_dir, cache_bytes) if cache_dir is not None else None

    def _opened(self, layout: FileLayout, fingerprint: str) -> None:
        """Set by a reader once it knows its files' samples and blocks."""
        self.layout, self.fingerprint = layout, fingerprint
        self.counts = [part.samples for part in layout.shards]
        self.starts = list(itertools.accumulate([0, *self.counts]))

    @property
    def index(self) -> FileLayout:
        return self.layout

    # -- the store --------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:  # to DataLoader workers: no live connection
        return {**self.__dict__, "_fs": None, "_blocks": OrderedDict(), "_ahead": None}

    @property
    def fs(self) -> Any:
        # One filesystem per process: s3fs's event loop is not fork-safe.
        if self._fs is None or self._fs_pid != os.getpid():
            self._fs, self._root = fsspec.core.url_to_fs(
                self.url, skip_instance_cache=True, **self.storage_options
            )
            self._fs_pid = os.getpid()
        return self._fs

    def path(self, name: str) -> str:
        """`name`'s path on the filesystem (a file name in `directory`, such as the kept
        index's)."""
        self.fs  # noqa: B018 - sets _root
        base = self._root.rstrip("/")
        return (
            f"{base}/{name}" if self.directory == self.url else f"{base.rsplit('/', 1)[0]}/{name}"
        )

    def call(self, what: str, fn: Callable[[], Any], retries: int | None = None,
             before_training: bool = False) -> Any:  # fmt: skip
        """`fn()`, retried with backoff on a store error; a missing file and damage pass
        through."""
        return retried(fn, what, self.url, self.retries if retries is None else retries,
                       self.backoff_s, before_training, passes=(Damaged, DamagedShards))  # fmt: skip

    def read(self, file: int, start: int, end: int) -> bytes:
        """Bytes [start, end) of file `file`; a file gone or cut short is one line naming it."""
        name = self.files[file].name
        try:
            data = self.call(f"reading {name}",
                             lambda: self.fs.cat_file(self.path(name), start=start, end=end))  # fmt: skip
        except FileNotFoundError:
            raise self.damaged(
                name, "listed when the data was opened but not there (deleted?)"
            ) from None
        except DataStoreUnreachable:
            raise
        if len(data) != end - start:
            raise self.damaged(name, f"bytes {start}-{end} read as {len(data)} (truncated?)")
        return data

    def _list(self) -> tuple[str, list[Listed]]:
        """The directory and the files of this format there, by name: `url/*SUFFIX`, else
        `url`'s parent's `PREFIX*SUFFIX` (a split kept as a prefix of names)."""
        where = f"data.url={redact_url(self.url)}"
        try:
            self.fs  # noqa: B018 - sets _root
            found = self._ls(self._root)
            directory = self.url
            if not found and "/" in self.url:
                directory, split = self.url.rsplit("/", 1)
                starts = PREFIXES.get(split, (split,))
                parent = self._root.rstrip("/").rsplit("/", 1)[0]
                found = [f for f in self._ls(parent) if f.name.startswith(starts)]
        except DataStoreUnreachable as err:
            raise ConfigError(str(err)) from None
        except Exception as err:  # noqa: BLE001 - an unknown protocol, a missing package
            extra = missing_extra(err)
            raise ConfigError(
                f"{where}: {extra}" if extra else
                f"{where} is not a usable URL ({type(err).__name__}: {err}). Give a local path "
                "or an fsspec URL such as s3://bucket/prefix (needs s3fs), gs://... (gcsfs)"
            ) from None  # fmt: skip
        if not found:
            raise ConfigError(
                f"{where}: no *{self.suffix} files there (nor {self.url}-*{self.suffix} beside "
                "it): give the directory that holds them"
            )
        return directory, sorted(found, key=lambda f: f.name)

    def _ls(self, root: str) -> list[Listed]:
        fs = self.fs

        def listing() -> list[dict[str, Any]]:
            try:
                return fs.ls(root, detail=True, refresh=True)
            except TypeError:  # a filesystem without the refresh keyword
                return fs.ls(root, detail=True)

        try:
            entries = self.call("listing", listing, retries=min(self.retries, 2),
                                before_training=True)  # fmt: skip
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [
            Listed(e["name"].rstrip("/").rsplit("/", 1)[-1], int(e.get("size") or 0), _stamp(e))
            for e in entries
            if e.get("type") != "directory" and e["name"].endswith(self.suffix)
        ]

    def damaged(self, name: str, what: str) -> DamagedShards:
        return DamagedShards(f"{redact_url(self.directory)}/{name}: damaged: {what}; {self.advice}")

    # -- samples ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < len(self):
            raise IndexError(index)
        file = bisect.bisect_right(self.starts, index) - 1
        within = index - self.starts[file]
        per = self.layout.samples_per_block
        key = (file, within // per)
        if key in self._blocks:
            self._blocks.move_to_end(key)
        else:
            self._blocks[key] = self._decode(*key, self._read_ahead(*key, index))
            if len(self._blocks) > self.memory_blocks:
                self._blocks.popitem(last=False)
        return self._blocks[key][within % per]

    def _decode(self, file: int, block: int, ahead: bytes | None = None) -> list[Any]:
        """Block `block` of file `file` as its samples (`samples_per_block`, fewer at a
        file's end), or one line naming the file; `ahead`: its bytes, checked, from the
        read-ahead (a reader that has one)."""
        raise NotImplementedError

    def locate(self, index: int) -> tuple[str, int]:
        """Sample `index`'s file (its URL, credentials cut) and place in that file."""
        file = bisect.bisect_right(self.starts, index) - 1
        name = self.layout.shards[file].name
        return f"{redact_url(self.directory)}/{name}", index - self.starts[file]

    def stall_advice(self) -> str:
        """The streaming knobs, for the data-wait warning (litforge.hooks.AdvisesOnStalls):
        the shards' advice, less its last clause (how to write larger shard blocks)."""
        shards = stall_advice(redact_url(self.url), self.cache_dir, self.layout.samples_per_block)
        return shards.rsplit("; fewer, larger reads", 1)[0] + (
            f"; fewer, larger reads: blocks here are {self.layout.samples_per_block} samples "
            f"({self.block_advice})"
        )
