"""Streamed datasets in the formats users already have, read where they lie: litforge's
shards (`litforge.data.shards`), Parquet (`parquet`, with pyarrow) and WebDataset tar
shards (`webdataset`, no webdataset package). Each reader has `source.StreamSource`'s
interface, so the order, the samplers, mixtures, the sample-id audit and the changed-data
check treat them alike.
"""

from __future__ import annotations

from typing import Any, Literal

from litforge.data.formats.columns import parse_columns
from litforge.data.formats.source import StreamSource
from litforge.data.shards import format as shard_format
from litforge.data.shards.reader import ShardedDataset
from litforge.errors import ConfigError

Format = Literal["shards", "parquet", "webdataset"]
FORMATS = ("shards", "parquet", "webdataset")
# What the Parquet and WebDataset readers take (`store.FileDataset`).
FILE_READER_KEYS = ("cache_dir", "cache_bytes", "retries", "backoff_s", "storage_options",
                    "memory_blocks")  # fmt: skip


def open_source(url: str, format: str | None = None, columns: Any = None,
                key: str = "data", **reader: Any) -> StreamSource:  # fmt: skip
    """The dataset at `url` in `format`; None: litforge's shards where `url/index.json`
    is, else the format the files there name by their suffix (.parquet, .tar). `key`: the
    config path the format and columns came from, for the lines that name them."""
    if format is not None and format not in FORMATS:
        raise ConfigError(f"{key}.format={format!r} is not a format: give one of "
                          f"{', '.join(FORMATS)} (or leave it out to detect it)")  # fmt: skip
    mapping = parse_columns(columns, f"{key}.columns")
    if format == "shards" or (format is None and columns is None):
        try:
            return ShardedDataset(url, **reader)
        except ConfigError as err:
            # Only a directory without an index may be another format's: every other line
            # (an unreachable store, a damaged index) stands as it is.
            if format == "shards" or f"no {shard_format.INDEX} there" not in str(err):
                raise
            found = detect(url, reader.get("storage_options"))
            if found is None:
                raise
            format = found
    elif format is None:
        format = detect(url, reader.get("storage_options")) or "shards"
        if format == "shards":
            raise ConfigError(f"{key}.columns is for Parquet or WebDataset files; {url} holds "
                              "neither (*.parquet, *.tar)")  # fmt: skip
    files = {k: v for k, v in reader.items() if k in FILE_READER_KEYS}
    if format == "parquet":
        from litforge.data.formats.parquet import ParquetDataset

        # No read-ahead: a row group is one read already (pyarrow writes them up to 1 Mi
        # rows), and its bytes are not known before its file's footer is read.
        return ParquetDataset(url, mapping, **files)
    from litforge.data.formats.webdataset import WebDatasetDataset

    ahead = {k: v for k, v in reader.items() if k in ("readahead_bytes", "read_threads")}
    return WebDatasetDataset(url, mapping, **files, **ahead)


def detect(url: str, storage_options: dict[str, Any] | None = None) -> str | None:
    """The format ("parquet", "webdataset") when the files at `url` (or named with its last part as a
    prefix beside it) end so; None when there are none, or the store does not say."""
    import fsspec

    from litforge.data.formats.store import PREFIXES

    base, split = url.rstrip("/").rsplit("/", 1) if "/" in url.rstrip("/") else (url, "")
    for where, starts in ((url.rstrip("/"), ("",)), (base, PREFIXES.get(split, (split,)))):
        try:
            fs, root = fsspec.core.url_to_fs(where, skip_instance_cache=True,
                                             **(storage_options or {}))  # fmt: skip
            names = [n.rsplit("/", 1)[-1] for n in fs.ls(root, detail=False)]
        except Exception:  # noqa: BLE001 - no listing: the shards' own line stands
            continue
        names = [n for n in names if n.startswith(starts)]
        if any(n.endswith(".parquet") for n in names):
            return "parquet"
        if any(n.endswith(".tar") for n in names):
            return "webdataset"
    return None
