"""The on-store layout of a sharded dataset (format version 1).

    URL/index.json          {"format": "litforge-shards", "version": 1, "samples": N,
                             "samples_per_block": B, "shards": [{"name", "samples",
                             "bytes"}], "provides": ...}; written last: its presence
                            means every shard is complete
    URL/shard-00000.lfs     b"LFSH", version u32, samples u64, blocks u32, then
                            blocks + 1 offsets u64 (from the file's start), then the
                            blocks of up to B samples each: as columns when they share
                            one structure (b"LFCB", u32 n, n bytes of JSON: the
                            structure, each column's values or its tensor's dtype,
                            shape and place; then the tensors' raw bytes: each leaf
                            stacked over the samples), else a `torch.save` of the list

A block is the unit of reading: one range request, then JSON and raw tensor bytes (or
`torch.load(weights_only=True)`): tensors, numbers, strings, tuples, lists, dicts, and
no code runs on load. Little-endian.
"""

from __future__ import annotations

import io
import json
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


def _structure(sample: Any, leaves: list[Any]) -> Any:
    """A plain description of `sample`'s nesting (loadable with weights_only), its leaves
    appended to `leaves`; None for what a column cannot hold."""
    if isinstance(sample, torch.Tensor):
        leaves.append(sample)
        return "tensor"
    if isinstance(sample, bool | int | float | str):
        leaves.append(sample)
        return type(sample).__name__
    if isinstance(sample, tuple | list):
        parts = [_structure(s, leaves) for s in sample]
        return None if None in parts else [type(sample).__name__, parts]
    if isinstance(sample, dict) and all(isinstance(k, str) for k in sample):
        parts = [_structure(v, leaves) for v in sample.values()]
        return None if None in parts else ["dict", list(sample), parts]
    return None


def _columns(samples: list[Any]) -> dict[str, Any] | None:
    """The block as columns: each tensor leaf stacked over the samples, each number or
    string a list. Decoding then loads a few tensors, not two per sample (measured on
    digits: 40 ms per block of 64 with torch.load's weights-only unpickler, 1 ms as
    columns). None when the samples differ in structure, shape or dtype."""
    rows: list[list[Any]] = []
    structures = []
    for sample in samples:
        rows.append([])
        structures.append(_structure(sample, rows[-1]))
    if structures[0] is None or any(s != structures[0] for s in structures):
        return None
    columns: list[Any] = []
    for leaf in zip(*rows, strict=True):
        if isinstance(leaf[0], torch.Tensor):
            if any(t.shape != leaf[0].shape or t.dtype != leaf[0].dtype for t in leaf):
                return None
            columns.append(torch.stack(leaf))
        else:
            columns.append(list(leaf))
    return {"structure": structures[0], "columns": columns, "samples": len(samples)}


def _build(structure: Any, columns: list[Any], at: list[int], i: int) -> Any:
    if isinstance(structure, str):
        value = columns[at[0]][i]
        at[0] += 1
        return value
    if structure[0] == "dict":
        return {
            k: _build(s, columns, at, i) for k, s in zip(structure[1], structure[2], strict=True)
        }
    parts = [_build(s, columns, at, i) for s in structure[1]]
    return tuple(parts) if structure[0] == "tuple" else parts


_COLUMNS = b"LFCB"  # a block as columns: magic, u32 header length, JSON header, raw bytes


def encode_block(samples: list[Any]) -> bytes:
    block = _columns(samples)
    if block is None:  # samples of differing structure: torch.save of the list
        buffer = io.BytesIO()
        torch.save(samples, buffer)
        return buffer.getvalue()
    header: list[Any] = []
    payload: list[bytes] = []
    at = 0
    for column in block["columns"]:
        if isinstance(column, torch.Tensor):
            raw = column.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            header.append({"dtype": str(column.dtype).removeprefix("torch."),
                           "shape": list(column.shape), "at": at, "bytes": len(raw)})  # fmt: skip
            payload.append(raw)
            at += len(raw)
        else:
            header.append({"values": column})
    meta = json.dumps({"structure": block["structure"], "samples": block["samples"],
                       "columns": header}).encode()  # fmt: skip
    return _COLUMNS + struct.pack("<I", len(meta)) + meta + b"".join(payload)


def decode_block(data: bytes) -> list[Any]:
    if data[:4] != _COLUMNS:
        return torch.load(io.BytesIO(data), weights_only=True)
    (size,) = struct.unpack_from("<I", data, 4)
    meta = json.loads(data[8 : 8 + size])
    raw = bytearray(data[8 + size :])  # writable: torch.frombuffer shares it
    columns: list[Any] = []
    for column in meta["columns"]:
        if "values" in column:
            columns.append(column["values"])
            continue
        flat = torch.frombuffer(raw, dtype=torch.uint8, count=column["bytes"], offset=column["at"])
        stacked = flat.view(getattr(torch, column["dtype"])).view(column["shape"])
        columns.append(stacked.unbind(0))  # every row's view in one call, not one each
    structure = meta["structure"]
    if isinstance(structure, str):  # one leaf per sample
        return list(columns[0])
    if structure[0] == "tuple" and all(isinstance(s, str) for s in structure[1]):
        return list(zip(*columns, strict=True))  # (x, y) samples, the common case, at C speed
    return [_build(structure, columns, [0], i) for i in range(meta["samples"])]


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
