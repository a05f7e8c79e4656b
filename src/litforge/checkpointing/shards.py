"""Which files of a sharded checkpoint (torch distributed checkpoint: `.metadata` plus
`__<rank>_<i>.distcp` shards) are at fault: missing, shorter than `.metadata` records, or
holding a tensor that does not load. Each problem names its file, in shard order."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import torch

METADATA = ".metadata"
# How many damaged files one line names before it counts the rest.
NAMED = 4


def shard_order(name: str) -> tuple[int, int, str]:
    """Sort key of a shard file: by rank, then index, as numbers (`__0_10` after `__0_9`)."""
    found = re.fullmatch(r"__(\d+)_(\d+)\.distcp", name)
    return (int(found[1]), int(found[2]), name) if found else (2**62, 0, name)


def read_metadata(path: Path) -> Any:
    """The checkpoint's `.metadata`, read as torch's own loader reads it."""
    from torch.distributed.checkpoint import FileSystemReader

    return FileSystemReader(path).read_metadata()


def _extents(metadata: Any) -> dict[str, list[Any]]:
    """Each shard file's stored items (offset, length, transforms), by file name."""
    files: dict[str, list[Any]] = {}
    for info in metadata.storage_data.values():
        files.setdefault(info.relative_path, []).append(info)
    return {name: files[name] for name in sorted(files, key=shard_order)}


def missing_or_short(path: Path, metadata: Any) -> list[str]:
    """Shards `.metadata` lists that are absent or end before their last item does."""
    problems = []
    for name, items in _extents(metadata).items():
        file = path / name
        needed = max(info.offset + info.length for info in items)
        if not file.is_file():
            problems.append(f"{name} is missing")
        elif (size := file.stat().st_size) < needed:
            problems.append(f"{name} is cut short ({size} of {needed} bytes)")
    return problems


def unloadable(path: Path, metadata: Any) -> list[str]:
    """Shards holding a tensor that torch.load (weights_only) cannot read: damaged bytes of
    the right length. Items stored with a transform (compression) are not checked."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    tensors = {
        index for index in metadata.storage_data
        if isinstance(metadata.state_dict_metadata.get(index.fqn), TensorStorageMetadata)
    }  # fmt: skip
    by_file: dict[str, list[Any]] = {}
    for index, info in metadata.storage_data.items():
        if index in tensors and not info.transform_descriptors:
            by_file.setdefault(info.relative_path, []).append(info)
    problems = []
    for name in sorted(by_file, key=shard_order):
        try:
            with (path / name).open("rb") as stream:
                for info in by_file[name]:
                    stream.seek(info.offset)
                    torch.load(io.BytesIO(stream.read(info.length)), weights_only=True)
        except Exception as err:  # noqa: BLE001 - whatever the bytes make torch.load raise
            # Only the kind: torch's text advises weights_only=False, never right here.
            problems.append(f"{name} does not load ({type(err).__name__})")
    return problems


def summary(problems: list[str]) -> str:
    """The first NAMED problems, and how many more there are."""
    shown = "; ".join(problems[:NAMED])
    more = len(problems) - NAMED
    return f"{shown}; and {more} more damaged shard{'s' * (more > 1)}" if more > 0 else shown
