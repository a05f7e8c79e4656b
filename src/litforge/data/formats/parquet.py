"""Parquet files, read where they lie: pyarrow decodes them, litforge fetches their bytes.

Parquet keeps its own index in each file's footer (row groups, their rows, each column
chunk's byte range), so opening a directory reads each file's tail (one range read of up
to 64 KiB, a second one for a larger footer) and nothing else. A block is `samples_per_block`
consecutive rows of a file, that size being the files' largest row group: where the row
groups share one size (pyarrow writes them so), block b is row group b, read with one range
read of the mapped columns' chunks through the bounded cache. The footers' sha256 with the
files' names and sizes is the data's fingerprint (a resume compares it): a file rewritten
with other rows has another footer (its offsets and statistics).

Damage is one line naming the file: a file cut short (its tail is not Parquet's), a footer
that does not parse or points past the file, a column data.columns names that a file
lacks, or a row group pyarrow cannot decode. Files written with page checksums
(`write_page_checksum=True`) have each page checked on reading; without them, a flipped
byte inside an uncompressed page's values can read as another value (the format has
nothing to check it against).
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import struct
from collections import OrderedDict
from typing import Any

from litforge.data.formats.columns import Columns, arrow_values
from litforge.data.formats.source import FileLayout, FilePart
from litforge.data.formats.store import FileDataset
from litforge.errors import ConfigError, redact_url

MAGIC = b"PAR1"
TAIL = 64 << 10  # bytes read from each file's end at opening: most footers fit
_ROW_GROUPS_KEPT = 4  # decoded row groups kept (a block may span two)


def pyarrow_modules() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            "data.format=parquet reads with pyarrow, which is not installed: pip install "
            "'litforge[parquet]'"
        ) from None
    return pa, pq


class _Sparse(io.RawIOBase):
    """A file of `size` bytes of which some ranges are held: what pyarrow reads of a row
    group. A read outside them is fetched (`fetch(start, end)`)."""

    def __init__(self, size: int, held: dict[int, bytes], fetch: Any) -> None:
        self.size, self.held, self.fetch, self.at = size, held, fetch, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.at

    def seek(self, offset: int, whence: int = 0) -> int:
        self.at = (
            offset if whence == 0 else (self.at + offset if whence == 1 else self.size + offset)
        )
        return self.at

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.at + n)
        start, self.at = self.at, end
        for first, data in self.held.items():
            if first <= start and end <= first + len(data):
                return data[start - first : end - first]
        return self.fetch(start, end) if end > start else b""

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class ParquetDataset(FileDataset):
    """The rows of the `*.parquet` files at `url`, each as `columns` says."""

    suffix = ".parquet"
    advice = "write the file again (pyarrow.parquet.write_table), or move it out of the directory"
    block_advice = "write the files with larger row groups"

    def __init__(self, url: str, columns: Columns, **reader: Any) -> None:
        super().__init__(url, **reader)
        self.columns = columns
        pa, pq = pyarrow_modules()
        self._footers: list[bytes] = []
        self._metas: list[Any] = []
        self._groups: list[list[tuple[int, int, int]]] = []  # per file: (rows, start, end)
        digests, types = [], None
        for file, listed in enumerate(self.files):
            footer, meta = self._footer(file, pq, pa)
            schema = meta.schema.to_arrow_schema()
            names = columns.names or schema.names
            missing = [c for c in names if c not in schema.names]
            if missing:
                raise self._refused(listed.name, f"has no column {missing[0]!r} (its columns: "
                                    f"{', '.join(schema.names)}); set data.columns to columns it "
                                    "has")  # fmt: skip
            found = {c: str(schema.field(c).type) for c in names}
            if types is None:
                types = (listed.name, found)
            elif found != types[1]:
                column = next(c for c in names if found[c] != types[1][c])
                raise self._refused(listed.name, f"its column {column!r} is {found[column]}, in "
                                    f"{types[0]} {types[1][column]}: every file of a split needs "
                                    "one schema")  # fmt: skip
            self._footers.append(footer)
            self._metas.append(meta)
            end_of_data = listed.bytes - 8 - len(footer)
            self._groups.append(self._row_groups(listed.name, meta, names, end_of_data))
            digests.append([listed.name, listed.bytes, hashlib.sha256(footer).hexdigest()])
        rows = [sum(g[0] for g in groups) for groups in self._groups]
        per_block = max((g[0] for groups in self._groups for g in groups), default=1) or 1
        parts = [FilePart(f.name, n) for f, n in zip(self.files, rows, strict=True)]
        self._opened(FileLayout(parts, per_block, {"format": "parquet"}),
                     hashlib.sha256(json.dumps(digests).encode()).hexdigest())  # fmt: skip
        self._cache_key = hashlib.sha256(f"{url}\n{self.fingerprint}".encode()).hexdigest()[:16]
        self._group_starts = [[0] + [sum(g[0] for g in groups[: i + 1]) for i in range(len(groups))]
                              for groups in self._groups]  # fmt: skip
        self._tables: OrderedDict[tuple[int, int], Any] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        # pyarrow's metadata objects do not pickle: workers parse the footers again.
        return {**super().__getstate__(), "_metas": None, "_tables": OrderedDict()}

    def _refused(self, name: str, what: str) -> Exception:
        from litforge.data.shards.faults import DamagedShards

        return DamagedShards(f"{redact_url(self.directory)}/{name}: {what}")

    # -- the footers ----------------------------------------------------------------------

    def _footer(self, file: int, pq: Any, pa: Any) -> tuple[bytes, Any]:
        """File `file`'s footer bytes and parsed metadata, or one line naming it."""
        name, size = self.files[file].name, self.files[file].bytes
        if size < 12:
            state = "empty" if size == 0 else f"{size} bytes"
            raise self.damaged(name, f"{state}, shorter than a Parquet file (truncated?)")
        tail = self.read(file, max(0, size - TAIL), size)
        if tail[-4:] != MAGIC:
            raise self.damaged(name, f"it does not end with Parquet's {MAGIC!r} (truncated?)")
        (length,) = struct.unpack("<I", tail[-8:-4])
        if length + 12 > size:
            raise self.damaged(name, f"its footer claims {length} bytes of a {size}-byte file")
        if length + 8 > len(tail):
            tail = self.read(file, size - 8 - length, size)
        footer = tail[len(tail) - 8 - length : len(tail) - 8]
        try:
            meta = pq.read_metadata(pa.BufferReader(MAGIC + footer + tail[-8:]))
        except Exception as err:  # noqa: BLE001 - a damaged footer raises any type
            first = str(err).splitlines()[0][:80] if str(err) else ""
            raise self.damaged(name, f"its footer does not parse ({type(err).__name__}: "
                               f"{first})") from None  # fmt: skip
        return footer, meta

    def _row_groups(self, name: str, meta: Any, names: list[str],
                    end_of_data: int) -> list[tuple[int, int, int]]:  # fmt: skip
        """Each row group's rows and the byte range of the mapped columns' chunks (which
        must lie between the leading magic and the footer)."""
        leaves = [i for i in range(meta.num_columns)
                  if meta.schema.column(i).path.split(".")[0] in names]  # fmt: skip
        groups = []
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            spans = []
            for i in leaves or range(meta.num_columns):
                chunk = group.column(i)
                first = chunk.data_page_offset
                if chunk.has_dictionary_page and chunk.dictionary_page_offset:
                    first = min(first, chunk.dictionary_page_offset)
                spans.append((first, first + chunk.total_compressed_size))
            start, end = min(s for s, _ in spans), max(e for _, e in spans)
            if start < 4 or end > end_of_data or group.num_rows < 0:
                raise self.damaged(name, f"its footer places row group {g} at bytes {start}-{end}, "
                                   f"its data ends at {end_of_data}")  # fmt: skip
            groups.append((group.num_rows, start, end))
        if sum(g[0] for g in groups) != meta.num_rows:
            raise self.damaged(name, f"its row groups hold {sum(g[0] for g in groups)} rows, its "
                               f"footer says {meta.num_rows}")  # fmt: skip
        return [g for g in groups if g[0]]

    # -- blocks ---------------------------------------------------------------------------

    def _decode(self, file: int, block: int, ahead: bytes | None = None) -> list[Any]:
        pa, _ = pyarrow_modules()
        per, starts = self.layout.samples_per_block, self._group_starts[file]
        first, last = block * per, min((block + 1) * per, self.counts[file])
        pieces = []
        g = bisect.bisect_right(starts, first) - 1
        while g < len(self._groups[file]) and starts[g] < last:
            table = self._table(file, g)
            lo, hi = max(first, starts[g]) - starts[g], min(last, starts[g + 1]) - starts[g]
            pieces.append(table.slice(lo, hi - lo))
            g += 1
        table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        names = self.columns.names or table.column_names
        try:
            values = {c: arrow_values(table.column(c).combine_chunks()) for c in names}
        except (ValueError, TypeError) as err:
            raise self._refused(self.files[file].name, f"rows {first}-{last}: {err}") from None
        return [self.columns.sample({c: values[c][i] for c in names}) for i in range(last - first)]

    def _table(self, file: int, group: int) -> Any:
        """Row group `group` of file `file`, decoded (the mapped columns)."""
        key = (file, group)
        if key in self._tables:
            self._tables.move_to_end(key)
            return self._tables[key]
        pa, pq = pyarrow_modules()
        name, size = self.files[file].name, self.files[file].bytes
        rows, start, end = self._groups[file][group]
        data = self._group_bytes(file, group, start, end)
        footer = self._footers[file]
        held = {
            start: data,
            size - 8 - len(footer): footer + struct.pack("<I", len(footer)) + MAGIC,
        }
        source = _Sparse(size, held, lambda s, e: self.read(file, s, e))
        if self._metas is None:  # in a loader worker: the footers parsed again, once
            self._metas = [pq.read_metadata(pa.BufferReader(MAGIC + f + struct.pack("<I", len(f))
                           + MAGIC)) for f in self._footers]  # fmt: skip
        try:
            reader = pq.ParquetFile(source, metadata=self._metas[file],
                                    page_checksum_verification=True)  # fmt: skip
            table = reader.read_row_group(self._group_index(file, group), columns=self.columns.names
                                          or None, use_threads=False)  # fmt: skip
        except Exception as err:  # noqa: BLE001 - a damaged row group raises any type
            if type(err).__name__ in ("DamagedShards", "DataStoreUnreachable"):
                raise
            first = str(err).splitlines()[0][:80] if str(err) else ""
            raise self.damaged(name, f"row group {group} does not decode ({type(err).__name__}: "
                               f"{first})") from None  # fmt: skip
        if table.num_rows != rows:
            raise self.damaged(name, f"row group {group} decodes to {table.num_rows} rows, its "
                               f"footer says {rows}")  # fmt: skip
        self._tables[key] = table
        if len(self._tables) > _ROW_GROUPS_KEPT:
            self._tables.popitem(last=False)
        return table

    def _group_index(self, file: int, group: int) -> int:
        """The footer's number of our `group` (row groups of no rows are left out)."""
        meta, seen = self._metas[file], -1
        for g in range(meta.num_row_groups):
            seen += meta.row_group(g).num_rows > 0
            if seen == group:
                return g
        raise AssertionError("a row group past the footer's")

    def _group_bytes(self, file: int, group: int, start: int, end: int) -> bytes:
        """Bytes [start, end) of a row group, from the cache (with a digest of its own, so a
        damaged entry is read again) or one range read."""
        key = f"{self._cache_key}-{self.files[file].name}-rg{group}"
        if self._cache is not None and (hit := self._cache.get(key)) is not None:
            if len(hit) == 32 + end - start and hashlib.sha256(hit[32:]).digest() == hit[:32]:
                return hit[32:]
            self._cache.drop(key)
        data = self.read(file, start, end)
        if self._cache is not None:
            self._cache.put(key, hashlib.sha256(data).digest() + data)
        return data
