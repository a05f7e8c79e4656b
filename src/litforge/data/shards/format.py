"""The on-store layout of a sharded dataset (format version 2).

    URL/index.json          {"format": "litforge-shards", "version": 2, "samples": N,
                             "samples_per_block": B, "shards": [{"name", "samples",
                             "bytes", "header": sha256 hex of the shard's header}],
                             "provides": ...}; written last: its presence means every
                             shard is complete
    URL/shard-00000.lfs     b"LFSH", version u32, samples u64, blocks u32, then
                            blocks + 1 offsets u64 (from the file's start), then each
                            block's digest (sha256, first 16 bytes), then the blocks of up to
                            B samples each (`blocks`)

Little-endian. Version 1 (no digests) is refused: a flipped byte in a block's tensor would
have been read as a different sample.

Everything here is read from a store someone else may write, so nothing is taken on
trust: the index's fields are checked for type and range, a shard's header against the
index (its sample count, block count and size, then its digest), its offsets against
each other and the file's size, and each block against its digest before it is decoded.
So the index, fetched at every start, vouches for every byte: a header or block kept in a
local cache is checked the same way. A fault raises `Damaged` saying what is wrong; the
reader names the file.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from litforge.data.shards.blocks import Damaged, decode_block, encode_block
from litforge.errors import ConfigError

__all__ = ["Damaged", "decode_block", "encode_block"]

FORMAT = "litforge-shards"
VERSION = 2
INDEX = "index.json"
MAGIC = b"LFSH"
DIGEST = 16  # bytes of a block's sha256 kept (measured here: 18 us per 17 KB, blake2b 31)
_HEAD = struct.Struct("<4sIQI")  # magic, version, samples, blocks
HEAD_SIZE = _HEAD.size
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")  # a file beside the index, no path
_HEX = re.compile(r"[0-9a-f]{64}")
REWRITE = "rewrite the dataset with `litforge shards write`"


@dataclass(frozen=True)
class ShardInfo:
    name: str
    samples: int
    bytes: int
    header: str  # sha256 hex of the shard's header (its counts, offsets, block digests)


def _count(value: Any, least: int) -> bool:
    return type(value) is int and value >= least


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
    def from_json(cls, record: Any, where: str) -> Index:
        """The index in `record` (parsed JSON), or one ConfigError line starting with
        `where` (the index's URL) that says what is wrong."""
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            found = record.get("format") if isinstance(record, dict) else type(record).__name__
            raise ConfigError(f"{where}: not a litforge shard index (format={found!r})")
        if record.get("version") != VERSION:
            raise ConfigError(
                f"{where}: shards of format version {record.get('version')}, this litforge "
                f"reads version {VERSION}; {REWRITE}"
            )
        shards = record.get("shards")
        if not isinstance(shards, list) or not shards:
            raise ConfigError(f"{where}: damaged: no list of shards; {REWRITE}")
        infos = []
        for i, shard in enumerate(shards):
            ok = isinstance(shard, dict) and isinstance(shard.get("name"), str)
            if not ok or not _NAME.fullmatch(shard["name"]):
                raise ConfigError(f"{where}: damaged: shard {i} has no file name; {REWRITE}")
            if not _count(shard.get("samples"), 1) or not _count(shard.get("bytes"), 1):
                raise ConfigError(
                    f"{where}: damaged: shard {shard['name']} has no positive samples and bytes"
                    f" counts; {REWRITE}"
                )
            header = shard.get("header")
            if not isinstance(header, str) or not _HEX.fullmatch(header):
                raise ConfigError(
                    f"{where}: damaged: shard {shard['name']} has no header digest; {REWRITE}"
                )
            infos.append(ShardInfo(shard["name"], shard["samples"], shard["bytes"], header))
        if len({s.name for s in infos}) != len(infos):
            raise ConfigError(f"{where}: damaged: a shard is listed twice; {REWRITE}")
        per_block = record.get("samples_per_block")
        if not _count(per_block, 1):
            raise ConfigError(
                f"{where}: damaged: samples_per_block={str(per_block)[:20]}, not a positive "
                f"count; {REWRITE}"
            )
        total = sum(s.samples for s in infos)
        if record.get("samples") != total:
            raise ConfigError(
                f"{where}: damaged: samples={str(record.get('samples'))[:20]}, but its shards "
                f"hold {total}; {REWRITE}"
            )
        provides = record.get("provides")
        if provides is not None and not isinstance(provides, str):
            raise ConfigError(f"{where}: damaged: provides is not a string; {REWRITE}")
        known = {"format", "version", "samples", "samples_per_block", "provides", "shards"}
        extra = {k: v for k, v in record.items() if k not in known}
        return cls(infos, per_block, provides, extra)


def block_digest(block: bytes) -> bytes:
    return hashlib.sha256(block).digest()[:DIGEST]


def encode_shard(blocks: list[bytes], samples: int) -> bytes:
    header = _HEAD.size + (8 + DIGEST) * len(blocks) + 8
    offsets, at = [], header
    for block in blocks:
        offsets.append(at)
        at += len(block)
    offsets.append(at)
    head = _HEAD.pack(MAGIC, VERSION, samples, len(blocks))
    head += struct.pack(f"<{len(offsets)}Q", *offsets)
    return head + b"".join(map(block_digest, blocks)) + b"".join(blocks)


def header_digest(shard: bytes) -> str:
    """The sha256 hex of an encoded shard's header, for the index."""
    (blocks,) = struct.unpack_from("<I", shard, _HEAD.size - 4)
    return hashlib.sha256(shard[: _HEAD.size + (8 + DIGEST) * blocks + 8]).hexdigest()


def header_size(first_bytes: bytes, shard: ShardInfo, samples_per_block: int, index: str) -> int:
    """Bytes of a shard's header, from its first `HEAD_SIZE` bytes, once they agree with
    what the index (at URL `index`) says of the shard; else Damaged."""
    if len(first_bytes) < _HEAD.size:
        raise Damaged(f"{len(first_bytes)} bytes, shorter than a shard's header (truncated)")
    magic, version, samples, blocks = _HEAD.unpack(first_bytes[: _HEAD.size])
    if magic != MAGIC:
        raise Damaged(f"not a litforge shard (its first bytes are {magic!r}, not {MAGIC!r})")
    if version != VERSION:
        raise Damaged(f"a shard of format version {version}, this litforge reads {VERSION}")
    if samples != shard.samples:
        raise Damaged(f"its header counts {samples} samples, {index} says {shard.samples}")
    expected = -(-samples // samples_per_block)
    if blocks != expected:
        raise Damaged(
            f"its header counts {blocks} blocks; {samples} samples of {samples_per_block} per "
            f"block ({index}) make {expected}"
        )
    return _HEAD.size + (8 + DIGEST) * blocks + 8


def block_offsets(header: bytes, shard: ShardInfo) -> tuple[list[int], list[bytes]]:
    """Start offsets of each block and the end of the last one, and each block's digest,
    from a whole header (`header_size` bytes) whose offsets run in order to the file's end."""
    _, _, _, blocks = _HEAD.unpack(header[: _HEAD.size])
    if len(header) != _HEAD.size + (8 + DIGEST) * blocks + 8:
        raise Damaged(f"a header of {len(header)} bytes for {blocks} blocks (truncated)")
    offsets = list(struct.unpack_from(f"<{blocks + 1}Q", header, _HEAD.size))
    at = _HEAD.size + 8 * (blocks + 1)
    digests = [header[at + DIGEST * i : at + DIGEST * (i + 1)] for i in range(blocks)]
    if offsets[0] != len(header):
        raise Damaged(
            f"its first block starts at byte {offsets[0]}, its header ends at {len(header)}"
        )
    if any(b <= a for a, b in itertools.pairwise(offsets)):
        raise Damaged("its block offsets are out of order")
    if offsets[-1] != shard.bytes:
        raise Damaged(f"its blocks end at byte {offsets[-1]} of a {shard.bytes}-byte file")
    return offsets, digests


def parse_header(
    header: bytes, shard: ShardInfo, samples_per_block: int, index: str
) -> tuple[list[int], list[bytes]]:
    """A whole header's block offsets and digests (`block_offsets`), once it agrees with the
    index (`header_size`); else Damaged."""
    length = header_size(header, shard, samples_per_block, index)
    if length > shard.bytes:
        raise Damaged(f"its header claims {length} bytes of a {shard.bytes}-byte file")
    offsets = block_offsets(header, shard)
    if hashlib.sha256(header).hexdigest() != shard.header:
        raise Damaged(f"its header does not match its digest in {index} (replaced or damaged?)")
    return offsets


def check_block(data: bytes, block: int, start: int, end: int, digest: bytes) -> None:
    """Damaged unless `data` is block `block`'s bytes [start, end) as written."""
    if len(data) != end - start:
        raise Damaged(f"block {block} is {len(data)} of its {end - start} bytes (truncated)")
    if block_digest(data) != digest:
        raise Damaged(f"block {block} (bytes {start}-{end}) does not match its digest")
