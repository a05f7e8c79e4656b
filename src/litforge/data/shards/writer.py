"""A dataset (map-style) or any iterator of samples -> shards at an fsspec URL."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from typing import Any

import fsspec
import torch

from litforge.data.shards import format as fmt
from litforge.errors import STORE_ADVICE, ConfigError, redact_url
from litforge.extras import missing_extra


def samples_of(data: Any) -> Iterator[Any]:
    """A map-style dataset's samples in index order, or an iterable's in its order."""
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        return (data[i] for i in range(len(data)))
    return iter(data)


def _owned(sample: Any) -> Any:
    """The sample with each tensor copied out: a view would save its whole base storage."""
    if isinstance(sample, torch.Tensor):
        return sample.detach().clone().contiguous()
    if isinstance(sample, tuple | list):
        return type(sample)(_owned(s) for s in sample)
    if isinstance(sample, dict):
        return {k: _owned(v) for k, v in sample.items()}
    return sample


def _writable(url: str, options: dict[str, Any], overwrite: bool) -> tuple[Any, str, str]:
    """The filesystem, root and index path at `url`, after a test write: a refused
    credential or a missing bucket is one line before the first shard is encoded."""
    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
        index_path = f"{root.rstrip('/')}/{fmt.INDEX}"
        exists = fs.exists(index_path)
        if not exists:
            fs.makedirs(root, exist_ok=True)
            fs.pipe_file(index_path + ".write-test", b"ok")
            fs.rm_file(index_path + ".write-test")
    except Exception as err:  # noqa: BLE001 - each backend raises its own types
        extra = missing_extra(err)
        if extra:
            raise ConfigError(f"{redact_url(url)}: {extra}") from None
        first = str(err).splitlines()[0] if str(err) else ""
        raise ConfigError(
            f"{redact_url(url)}: cannot write there ({type(err).__name__}: {first}). {STORE_ADVICE}"
        ) from None
    if exists and not overwrite:
        raise ConfigError(
            f"{redact_url(url)} already holds shards (its {fmt.INDEX}); pass overwrite"
        )
    return fs, root, index_path


def write_shards(
    data: Iterable[Any],
    url: str,
    *,
    samples_per_shard: int = 4096,
    samples_per_block: int = 64,
    provides: str | None = None,
    meta: dict[str, Any] | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> fmt.Index:
    """Write `data` (a map-style dataset or an iterable of samples) as shards at `url`;
    the index goes last, so a reader never sees a half-written dataset. `meta`: JSON
    values kept in the index for readers (e.g. the text windows' `block_size`)."""
    if samples_per_block < 1 or samples_per_shard < samples_per_block:
        raise ConfigError(
            f"samples_per_block={samples_per_block}, samples_per_shard={samples_per_shard}: "
            "give samples_per_block >= 1 and samples_per_shard >= samples_per_block"
        )
    fs, root, index_path = _writable(url, storage_options or {}, overwrite)
    shards: list[fmt.ShardInfo] = []
    blocks: list[bytes] = []
    block: list[Any] = []
    in_shard = 0
    # Of every shard's bytes, in the index: data rewritten with other content changes the
    # index's bytes too, so a resume notices it even where the counts and sizes match.
    content = hashlib.sha256()

    def flush_block() -> None:
        nonlocal block
        if block:
            blocks.append(fmt.encode_block(block))
            block = []

    def flush_shard() -> None:
        nonlocal blocks, in_shard
        flush_block()
        if not blocks:
            return
        name = f"shard-{len(shards):05d}.lfs"
        data_bytes = fmt.encode_shard(blocks, in_shard)
        content.update(data_bytes)
        fs.pipe_file(f"{root.rstrip('/')}/{name}", data_bytes)
        shards.append(fmt.ShardInfo(name, in_shard, len(data_bytes), fmt.header_digest(data_bytes)))
        blocks, in_shard = [], 0

    for sample in samples_of(data):
        block.append(_owned(sample))
        in_shard += 1
        if len(block) == samples_per_block:
            flush_block()
        if in_shard == samples_per_shard:
            flush_shard()
    flush_shard()
    if not shards:
        raise ConfigError(f"nothing to write to {redact_url(url)}: the dataset has no samples")
    extra = {**(meta or {}), "content_sha256": content.hexdigest()}
    index = fmt.Index(shards, samples_per_block, provides, extra)
    fs.pipe_file(index_path, json.dumps(index.to_json(), indent=1).encode())
    return index
