"""One block of samples as bytes and back.

A block holds its samples as columns when they share one structure (b"LFCB", u32 n, n
bytes of JSON: the structure, each column's values or its tensor's dtype, shape and place;
then the tensors' raw bytes: each leaf stacked over the samples), else as a `torch.save` of
the list, loaded with `weights_only=True`: tensors, numbers, strings, tuples, lists, dicts,
and no code runs on load.

A block's bytes may come from anyone's bucket, so decoding trusts none of them: the JSON's
dtypes come from an allow-list, every shape, size and place is checked against the block's
own length before a byte is viewed, and the samples must number what the shard promises.
Anything else raises `Damaged` saying what is wrong; the reader names the file.
"""

from __future__ import annotations

import io
import json
import math
import struct
from typing import Any

import torch

_COLUMNS = b"LFCB"  # a block as columns: magic, u32 header length, JSON header, raw bytes
_LEAVES = {"tensor": torch.Tensor, "bool": bool, "int": int, "float": float, "str": str}
# The dtypes a column may hold, by the name the writer gives (str(dtype) without "torch.");
# never getattr(torch, name): the name is the file's, not ours.
_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.complex64,
        torch.complex128,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )  # fmt: skip
}
_MAX_DIMS = 32
_MAX_DIM = 1 << 40  # one dimension's size (a zero elsewhere lets the others be anything)


class Damaged(ValueError):
    """Bytes that are not what they claim: the message says what is wrong (no file name:
    the caller knows which file it read)."""


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
            if str(leaf[0].dtype).removeprefix("torch.") not in _DTYPES:
                return None  # a dtype the reader would refuse: the list, torch.save'd
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


def _leaf_kinds(structure: Any, kinds: list[str]) -> None:
    """The leaves' kinds of a structure read from a file, in column order, or Damaged."""
    if isinstance(structure, str) and structure in _LEAVES:
        kinds.append(structure)
        return
    ok = isinstance(structure, list) and len(structure) in (2, 3)
    if ok and structure[0] in ("tuple", "list") and len(structure) == 2:
        parts = structure[1]
    elif ok and structure[0] == "dict" and len(structure) == 3:
        keys, parts = structure[1], structure[2]
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise Damaged("a block's structure has dict keys that are not strings")
        if not isinstance(parts, list) or len(keys) != len(parts):
            raise Damaged("a block's structure has dict keys and values that do not pair")
    else:
        raise Damaged(f"a block's structure holds {str(structure)[:40]!r}, not a sample layout")
    if not isinstance(parts, list):
        raise Damaged("a block's structure is not a list of parts")
    for part in parts:
        _leaf_kinds(part, kinds)


def _tensor_column(column: dict[str, Any], raw: bytearray, samples: int) -> torch.Tensor:
    """A column's stacked tensor, its dtype, shape and byte range checked first."""
    name = column.get("dtype")
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise Damaged(f"a column of dtype {str(column.get('dtype'))[:20]!r}, not a tensor dtype")
    shape, at, size = column.get("shape"), column.get("at"), column.get("bytes")
    dims_ok = isinstance(shape, list) and 1 <= len(shape) <= _MAX_DIMS
    if not dims_ok or not all(type(d) is int and 0 <= d < _MAX_DIM for d in shape):
        raise Damaged(f"a column's shape {str(shape)[:40]} is not a list of sizes")
    if shape[0] != samples:
        raise Damaged(f"a column holds {shape[0]} samples, the block {samples}")
    if type(at) is not int or type(size) is not int or at < 0:
        raise Damaged("a column's place in the block is not a byte offset and length")
    if size != math.prod(shape) * dtype.itemsize:
        raise Damaged(f"a column of shape {shape} ({dtype}) claims {size} bytes")
    if at + size > len(raw):
        raise Damaged(f"a column reaches byte {at + size} of a block payload of {len(raw)}")
    try:
        if not size:  # torch.frombuffer refuses zero bytes
            return torch.empty(shape, dtype=dtype)
        flat = torch.frombuffer(raw, dtype=torch.uint8, count=size, offset=at)
        return flat.view(dtype).view(shape)
    except (RuntimeError, ValueError, TypeError, OverflowError):
        raise Damaged(f"a column of shape {str(shape)[:40]} that torch refuses") from None


def _values_column(values: Any, kind: str, samples: int) -> list[Any]:
    if not isinstance(values, list) or len(values) != samples:
        raise Damaged(f"a column of {kind}s does not hold {samples} values")
    want = _LEAVES[kind]
    if kind == "float":  # JSON writes 1.0 back as a float, but an int is a fair float
        ok = all(type(v) in (float, int) for v in values)
        values = [float(v) for v in values] if ok else values
    else:
        ok = all(type(v) is want for v in values)
    if not ok:
        raise Damaged(f"a column of {kind}s holds values of another type")
    return values


def _decode_columns(data: bytes, samples: int) -> list[Any]:
    if len(data) < 8:
        raise Damaged(f"a column block of {len(data)} bytes, shorter than its header")
    (size,) = struct.unpack_from("<I", data, 4)
    if 8 + size > len(data):
        raise Damaged(f"a column header of {size} bytes in a block of {len(data)}")
    try:
        meta = json.loads(data[8 : 8 + size])
    except (ValueError, RecursionError):
        raise Damaged("a column header that is not JSON") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("columns"), list):
        raise Damaged("a column header without its columns")
    if meta.get("samples") != samples:
        raise Damaged(f"a block of {str(meta.get('samples'))[:20]} samples where {samples} belong")
    kinds: list[str] = []
    try:
        _leaf_kinds(meta.get("structure"), kinds)
    except RecursionError:
        raise Damaged("a block's structure nested past any sample's") from None
    if len(kinds) != len(meta["columns"]):
        raise Damaged(
            f"a block's structure has {len(kinds)} leaves for {len(meta['columns'])} columns"
        )
    raw = bytearray(data[8 + size :])  # writable: torch.frombuffer shares it
    columns: list[Any] = []
    for kind, column in zip(kinds, meta["columns"], strict=True):
        if not isinstance(column, dict) or (kind == "tensor") == ("values" in column):
            raise Damaged(f"a column that does not hold the {kind}s its structure says")
        if kind == "tensor":
            columns.append(_tensor_column(column, raw, samples).unbind(0))  # all rows' views
        else:
            columns.append(_values_column(column["values"], kind, samples))
    structure = meta["structure"]
    if isinstance(structure, str):  # one leaf per sample
        return list(columns[0])
    if columns and structure[0] == "tuple" and all(isinstance(s, str) for s in structure[1]):
        return list(zip(*columns, strict=True))  # (x, y) samples, the common case, at C speed
    return [_build(structure, columns, [0], i) for i in range(samples)]


def decode_block(data: bytes, samples: int) -> list[Any]:
    """The `samples` samples of a block's bytes, or `Damaged` saying what is wrong."""
    if data[:4] == _COLUMNS:
        return _decode_columns(data, samples)
    try:
        decoded = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as err:  # noqa: BLE001 - a damaged pickle raises any type
        first = str(err).splitlines()[0][:80] if str(err) else ""
        raise Damaged(f"a block that does not load ({type(err).__name__}: {first})") from None
    if not isinstance(decoded, list) or len(decoded) != samples:
        got = f"{len(decoded)} samples" if isinstance(decoded, list) else type(decoded).__name__
        raise Damaged(f"a block of {got} where {samples} samples belong")
    return decoded
