"""Data in the formats users already have, written by those formats' own writers (pyarrow's
Parquet writer; tar members named as WebDataset names them, `KEY.EXT`), never by litforge's:
the digits splits, and small numbered datasets."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from litforge_examples.data.digits import DigitsDataModule

SPLITS = ("train", "val", "test")


def put(url: str, data: bytes) -> None:
    fs, path = fsspec.core.url_to_fs(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, data)


def parquet_bytes(table: pa.Table, row_group_size: int, **options: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_size, **options)
    return sink.getvalue()


def images_table(images: np.ndarray, labels: np.ndarray) -> pa.Table:
    """Images (n, 1, 8, 8) as nested fixed-size lists, labels as int64."""
    flat = pa.array(images.reshape(-1).astype(np.float32))
    nested = pa.FixedSizeListArray.from_arrays(
        pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(flat, 8), 8), 1
    )
    return pa.table({"image": nested, "label": pa.array(labels.astype(np.int64))})


def tar_bytes(samples: list[tuple[str, dict[str, bytes]]]) -> bytes:
    """A tar of each (key, {ext: bytes}) as consecutive members `key.ext`, as WebDataset's
    TarWriter writes them (with Python's tarfile)."""
    sink = io.BytesIO()
    with tarfile.open(fileobj=sink, mode="w") as archive:
        for key, members in samples:
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size, info.mtime = len(data), 1_700_000_000
                archive.addfile(info, io.BytesIO(data))
    return sink.getvalue()


def npy(array: np.ndarray) -> bytes:
    sink = io.BytesIO()
    np.save(sink, array)
    return sink.getvalue()


def digits_splits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    digits = DigitsDataModule(batch_size=64)
    digits.setup("fit")
    out = {}
    for split in SPLITS:
        images, labels = getattr(digits, f"{split}_set").tensors
        out[split] = (images.numpy(), labels.numpy())
    return out


def write_digits_parquet(url: str, files: int = 3, row_group_size: int = 64) -> None:
    """The digits splits as `url/SPLIT/part-N.parquet` (columns image, label)."""
    for split, (images, labels) in digits_splits().items():
        table = images_table(images, labels)
        step = -(-len(labels) // files)
        for n, at in enumerate(range(0, len(labels), step)):
            put(f"{url}/{split}/part-{n}.parquet",
                parquet_bytes(table.slice(at, step), row_group_size))  # fmt: skip


def write_digits_webdataset(url: str, per_tar: int = 500) -> None:
    """The digits splits as `url/SPLIT/shard-NNNNNN.tar` (members KEY.npy, KEY.cls)."""
    for split, (images, labels) in digits_splits().items():
        samples = [(f"{split}{i:06d}", {"npy": npy(images[i]), "cls": str(int(labels[i])).encode()})
                   for i in range(len(labels))]  # fmt: skip
        for n, at in enumerate(range(0, len(samples), per_tar)):
            put(f"{url}/{split}/shard-{n:06d}.tar", tar_bytes(samples[at : at + per_tar]))


def numbered_parquet(url: str, n: int, row_group_size: int = 8, files: int = 2,
                     offset: int = 0, **options: Any) -> None:  # fmt: skip
    """Rows x = [i, i], y = i, name = "s<i>", in `files` files at `url`."""
    x = np.repeat(np.arange(offset, offset + n, dtype=np.float32), 2)
    table = pa.table({
        "x": pa.FixedSizeListArray.from_arrays(pa.array(x), 2),
        "y": pa.array(np.arange(offset, offset + n, dtype=np.int64)),
        "name": [f"s{i}" for i in range(offset, offset + n)],
    })  # fmt: skip
    step = -(-n // files)
    for k, at in enumerate(range(0, n, step)):
        put(
            f"{url}/part-{k}.parquet",
            parquet_bytes(table.slice(at, step), row_group_size, **options),
        )


def numbered_tars(url: str, n: int, per_tar: int = 100, offset: int = 0) -> None:
    """Samples KEY.npy = [i, i] (float32), KEY.cls = i, in tars of `per_tar` at `url`."""
    samples = [(f"k{i:06d}", {"npy": npy(np.array([i, i], dtype=np.float32)),
                              "cls": str(i).encode()}) for i in range(offset, offset + n)]  # fmt: skip
    for k, at in enumerate(range(0, n, per_tar)):
        put(f"{url}/shard-{k:06d}.tar", tar_bytes(samples[at : at + per_tar]))
