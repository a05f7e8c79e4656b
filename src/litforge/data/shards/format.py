"""The on-store layout of a sharded dataset (format version 1).

    URL/index.json          {"format": "litforge-shards", "version": 1, "samples": N,
                             "samples_per_block": B, "shards": [{"name", "samples",
                             "bytes"}], "provides": ...}; written last: its presence
                            means every shard is complete
    URL/shard-00000.lfs     b"LFSH", version u32, samples u64, blocks u32, then
                            blocks + 1 offsets u64 (from the file's start), then the
                            blocks: each a `torch.save` of a list of up to B samples

A block is the unit of reading: one range request and one `torch.load(weights_only=True)`
(tensors, numbers, strings, tuples, lists, dicts: no code runs on load). Little-endian.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from typing import Any

import torch

from litforge.errors import ConfigError

FORMAT = "litforge-shards"
VERSION = 1
INDEX = "index.json"
MAGIC = b"LFSH"
_HEAD = struct.Struct("<4sIQI")  # magic, version, samples, blocks


@dataclass(frozen=True)
class ShardInfo:
    name: str
    samples: int
    bytes: int


@dataclass(frozen=True)
class Index:
    shards: list[ShardInfo]
    samples_per_block: int
    provides: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "samples": self.samples,
            "samples_per_block": self.samples_per_block, "provides": self.provides,
            "shards": [vars(s) for s in self.shards], **self.extra,
        }  # fmt: skip

    @classmethod
    def from_json(cls, record: dict[str, Any], where: str) -> Index:
        if record.get("format") != FORMAT:
            raise ConfigError(
                f"{where}: not a litforge shard index (format={record.get('format')!r})"
            )
        if record.get("version") != VERSION:
            raise ConfigError(
                f"{where}: shards of format version {record.get('version')}, this litforge "
                f"reads version {VERSION}; rewrite them with `litforge shards write`"
            )
        shards = [
            ShardInfo(str(s["name"]), int(s["samples"]), int(s["bytes"])) for s in record["shards"]
        ]
        known = {"format", "version", "samples", "samples_per_block", "provides", "shards"}
        extra = {k: v for k, v in record.items() if k not in known}
        return cls(shards, int(record["samples_per_block"]), record.get("provides"), extra)


def encode_block(samples: list[Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(samples, buffer)
    return buffer.getvalue()


def decode_block(data: bytes) -> list[Any]:
    return torch.load(io.BytesIO(data), weights_only=True)


def encode_shard(blocks: list[bytes], samples: int) -> bytes:
    header = _HEAD.size + 8 * (len(blocks) + 1)
    offsets, at = [], header
    for block in blocks:
        offsets.append(at)
        at += len(block)
    offsets.append(at)
    head = _HEAD.pack(MAGIC, VERSION, samples, len(blocks)) + struct.pack(
        f"<{len(offsets)}Q", *offsets
    )
    return head + b"".join(blocks)


def header_size(first_bytes: bytes) -> int:
    """Bytes of a shard's header, from its first `_HEAD.size` bytes."""
    magic, version, _, blocks = _HEAD.unpack(first_bytes[: _HEAD.size])
    if magic != MAGIC or version != VERSION:
        raise ConfigError(f"a shard of another format (magic {magic!r}, version {version})")
    return _HEAD.size + 8 * (blocks + 1)


def block_offsets(header: bytes) -> list[int]:
    """Start offsets of each block, and the end of the last one."""
    _, _, _, blocks = _HEAD.unpack(header[: _HEAD.size])
    return list(struct.unpack_from(f"<{blocks + 1}Q", header, _HEAD.size))


HEAD_SIZE = _HEAD.size
