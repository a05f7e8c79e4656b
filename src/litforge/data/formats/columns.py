"""Which of a file's columns (Parquet) or members (WebDataset) make a sample, and how
they become tensors.

`data.columns` maps them: a name (each sample is that column's value), a list of names
(a tuple, e.g. `[image, label]` for a classifier's `(x, y)`), or a mapping (a dict
`{x: image, y: label}`). None: every column, as a dict by its name.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from litforge.errors import ConfigError


@dataclass(frozen=True)
class Columns:
    """The parsed mapping: `outputs` are (key in the sample, column); `shape` is "one",
    "tuple", "dict", or "all" (every column, by its own name)."""

    shape: str
    outputs: tuple[tuple[str, str], ...] = ()

    @property
    def names(self) -> list[str]:
        return [column for _, column in self.outputs]

    def sample(self, values: Mapping[str, Any]) -> Any:
        """One sample from its columns' values (`values[column]`)."""
        if self.shape == "one":
            return values[self.outputs[0][1]]
        if self.shape == "tuple":
            return tuple(values[column] for _, column in self.outputs)
        if self.shape == "dict":
            return {key: values[column] for key, column in self.outputs}
        return dict(values)


def parse_columns(value: Any, key: str = "data.columns") -> Columns:
    """`data.columns` as `Columns`, or one line naming the key and what it takes."""
    if value is None:
        return Columns("all")
    if isinstance(value, str) and value:
        return Columns("one", ((value, value),))
    names = isinstance(value, Sequence) and not isinstance(value, str) and value
    if names and all(isinstance(v, str) and v for v in value) and len(set(value)) == len(value):
        return Columns("tuple", tuple((v, v) for v in value))
    if isinstance(value, Mapping) and value:
        pairs = tuple((k, v) for k, v in value.items())
        if all(isinstance(k, str) and isinstance(v, str) and k and v for k, v in pairs):
            return Columns("dict", pairs)
    raise ConfigError(
        f"{key}={value!r} must be a column name, a non-empty list of distinct names (samples "
        "as tuples, e.g. [image, label]) or a mapping of sample keys to names ({x: image, "
        "y: label})"
    )


# -- Parquet: arrow columns to per-row values ------------------------------------------


def arrow_values(array: Any) -> list[Any]:
    """A pyarrow array's rows: numbers as 0-d tensors, (nested) lists of numbers as tensors
    (stacked when every row has one shape), strings and bytes as they are, anything else as
    Python values. A null in a number column is a ValueError saying so."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        if array.null_count:
            raise ValueError(f"{array.null_count} null(s) in a column of {kind} (not a tensor)")
        return list(_tensor(array.to_numpy(zero_copy_only=False)).unbind(0))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        stacked = _regular(array)
        if stacked is not None:
            return list(stacked.unbind(0))
        return [None if row is None else torch.tensor(row) for row in array.to_pylist()]
    return array.to_pylist()


def _tensor(values: np.ndarray) -> torch.Tensor:
    # A copy: torch.from_numpy shares memory with an arrow buffer that is read-only.
    return torch.from_numpy(np.array(values, copy=True))


def _regular(array: Any) -> torch.Tensor | None:
    """Rows of nested lists of numbers, all of one shape, as one (rows, ...) tensor; None
    when they differ in length, hold nulls, or hold other than numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows, dims = len(array), []
    while pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or \
            pa.types.is_fixed_size_list(array.type):  # fmt: skip
        if array.null_count:
            return None
        lengths = pc.list_value_length(array)
        if len(lengths) and pc.min(lengths).as_py() != pc.max(lengths).as_py():
            return None
        dims.append(lengths[0].as_py() if len(lengths) else 0)
        array = array.flatten()
    kind = array.type
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    if not numeric or array.null_count:
        return None
    return _tensor(array.to_numpy(zero_copy_only=False)).reshape(rows, *dims)


# -- WebDataset: members by extension ----------------------------------------------------

_INTS = {"cls", "cls2", "index", "inx", "id"}
_TEXTS = {"txt", "text", "transcript"}
_JSON = {"json", "jsn"}
_TORCH = {"pth", "pt"}


def decode_member(ext: str, data: bytes) -> Any:
    """A WebDataset member's bytes by the last part of its extension, as webdataset's
    default decoders do: cls/id... an int (a 0-d int64 tensor), txt a str, json its value, npy a tensor
    (`allow_pickle=False`), pth `torch.load(weights_only=True)`; anything else (images,
    audio) its bytes, for a transform of yours. A ValueError says what does not decode.
    Never unpickles: a tar is anyone's."""
    last = ext.rsplit(".", 1)[-1].lower()
    try:
        if last in _INTS:  # a 0-d tensor, as a Parquet number: a mixture's batches collate
            return torch.tensor(int(data.decode().strip()), dtype=torch.int64)
        if last in _TEXTS:
            return data.decode()
        if last in _JSON:
            return json.loads(data)
        if last == "npy":
            return _tensor(np.load(io.BytesIO(data), allow_pickle=False))
        if last in _TORCH:
            return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as err:  # noqa: BLE001 - a damaged member raises any type
        first = str(err).splitlines()[0][:80] if str(err) else ""
        raise ValueError(f"does not decode as .{last} ({type(err).__name__}: {first})") from None
    return data
