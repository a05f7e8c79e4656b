"""WebDataset tar shards, read where they lie: samples grouped by key as WebDataset writes
them, blocks of `BLOCK_SAMPLES` samples fetched with one range read each.

A tar has no index, so one is built by one scan of each archive (`tar.index_tar`) and
kept: in `data.cache_dir` when there is one, else beside the tars (`litforge-index.json`,
or `litforge-index-SPLIT.json` for a split kept as a prefix of names), written where the
store lets it. At each start the listing is compared with it: a new tar is scanned and
added; a tar whose size changed, or that is gone, is refused in one line (a file cut
short or deleted is damage, as for litforge's shards); one whose stamp (ETag, mtime)
changed at the same size is scanned again and must give the same digests. The index's
digest of every block then vouches for each byte read, and the sha256 of its samples'
layout and digests is the data's fingerprint (a resume compares it). The kept index is
data someone else could have written: an entry whose blocks do not tile its tar from byte
0 is scanned again, and the last block's read checks that the archive ends there, so no
index, however well formed, leaves a sample out unsaid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from litforge.data.formats import tar
from litforge.data.formats.columns import Columns, decode_member
from litforge.data.formats.source import FileLayout, FilePart
from litforge.data.formats.store import FileDataset, Listed
from litforge.data.shards.blocks import Damaged
from litforge.data.shards.faults import DamagedShards
from litforge.data.shards.readahead import split_run
from litforge.errors import redact_url

log = logging.getLogger("litforge")
BLOCK_SAMPLES = 64  # samples per block (one range read each)
INDEX_FORMAT, INDEX_VERSION = "litforge-webdataset-index", 2
_SCAN_READ = 8 << 20  # bytes per read of the one scan: a sequential download


class WebDatasetDataset(FileDataset):
    """The samples of the `*.tar` files at `url`, each as `columns` says (by extension)."""

    suffix = ".tar"
    advice = "write the tar again, or move it out of the directory"
    block_advice = "fixed for tars: raise data.num_workers instead"

    def __init__(self, url: str, columns: Columns, readahead_bytes: int = 64 << 20,
                 read_threads: int = 8, **reader: Any) -> None:  # fmt: skip
        super().__init__(url, **reader)
        # As for litforge's shards (`ShardedDataset`): the order's next blocks fetched
        # ahead as few range reads, on read_threads at once (0 bytes: none).
        self.readahead_bytes, self.read_threads = readahead_bytes, read_threads
        self.columns = columns
        self.tars = self._indexed()
        for listed, entry in zip(self.files, self.tars, strict=True):
            self._check_columns(listed.name, entry)
        layout = FileLayout([FilePart(f.name, t["samples"]) for f, t in zip(self.files, self.tars,
                             strict=True)], BLOCK_SAMPLES, {"format": "webdataset"})  # fmt: skip
        content = [[f.name, f.bytes, t["samples"], t["blocks"]] for f, t in zip(self.files,
                   self.tars, strict=True)]  # fmt: skip
        self._opened(layout, hashlib.sha256(json.dumps(content).encode()).hexdigest())
        self._cache_key = hashlib.sha256(f"{url}\n{self.fingerprint}".encode()).hexdigest()[:16]

    # -- the index ------------------------------------------------------------------------

    def index_location(self) -> str:
        """Where the index is kept: a local path in the cache, or a URL beside the tars."""
        if self.cache_dir is not None:
            key = hashlib.sha256(redact_url(self.url).encode()).hexdigest()[:16]
            return str(Path(self.cache_dir) / f"{key}-webdataset-index.json")
        return f"{self.directory}/{self._index_name()}"

    def _shown_index(self) -> str:
        where = self.index_location()
        return where if self.cache_dir is not None else redact_url(where)

    def _index_name(self) -> str:
        split = "" if self.directory == self.url else "-" + self.url.rsplit("/", 1)[-1]
        return f"litforge-index{split}.json"

    def _load_kept(self, where: str) -> dict[str, dict[str, Any]]:
        """The kept index's entries by tar name; {} when there is none or it is not one
        (it is rebuilt: the tars, not the index, are the data)."""
        try:
            if self.cache_dir is not None:
                raw = Path(where).read_bytes()
            else:
                path = self.path(self._index_name())
                raw = self.call("reading the index", lambda: self.fs.cat_file(path),
                                retries=min(self.retries, 2), before_training=True)  # fmt: skip
            record = json.loads(raw)
        except (OSError, ValueError, RecursionError):
            return {}
        ok = isinstance(record, dict) and record.get("format") == INDEX_FORMAT
        if not ok or record.get("version") != INDEX_VERSION:
            return {}
        if record.get("samples_per_block") != BLOCK_SAMPLES or not isinstance(
            record.get("tars"), dict
        ):
            return {}
        return {name: entry for name, entry in record["tars"].items() if _entry_ok(entry)}

    def _indexed(self) -> list[dict[str, Any]]:
        """Each listed tar's index entry: kept, or built by scanning it (then kept)."""
        where = self.index_location()
        kept = self._load_kept(where)
        shown = self._shown_index()
        entries, scanned = [], False
        for file, listed in enumerate(self.files):
            entry = kept.get(listed.name)
            if entry is not None and entry["bytes"] != listed.bytes:
                state = "empty" if listed.bytes == 0 else f"{listed.bytes} bytes"
                raise self.damaged(listed.name, f"{state}, {shown} says {entry['bytes']} "
                                   "(truncated or rewritten? delete that index to read the "
                                   "tars as they are now)")  # fmt: skip
            if entry is None or (listed.stamp and entry["stamp"] != listed.stamp):
                fresh = self._scan(file, listed)
                if entry is not None and fresh["blocks"] != entry["blocks"]:
                    raise self.damaged(listed.name, f"its bytes differ from those {shown} "
                                       "indexed (damaged, or rewritten: delete that index to "
                                       "read the tars as they are now)")  # fmt: skip
                entry, scanned = fresh, True
            entries.append(entry)
        if set(kept) - {f.name for f in self.files}:
            gone = sorted(set(kept) - {f.name for f in self.files})[0]
            raise self.damaged(gone, f"indexed in {shown} but not there (deleted?)")
        if scanned:
            self._keep(where, entries)
        return entries

    def _scan(self, file: int, listed: Listed) -> dict[str, Any]:
        name = listed.name

        def scan() -> tar.TarIndex:
            with self.fs.open(
                self.path(name), "rb", block_size=_SCAN_READ, cache_type="none"
            ) as stream:
                return tar.index_tar(tar.Chunked(stream.read, _SCAN_READ).read, BLOCK_SAMPLES)

        try:
            found = self.call(f"indexing {name}", scan, before_training=True)
        except FileNotFoundError:
            raise self.damaged(name, "listed but not there (deleted?)") from None
        except Damaged as err:
            raise self.damaged(name, str(err)) from None
        return {"bytes": listed.bytes, "stamp": listed.stamp, "samples": found.samples,
                "blocks": found.blocks, "kinds": found.kinds}  # fmt: skip

    def _keep(self, where: str, entries: list[dict[str, Any]]) -> None:
        record = {"format": INDEX_FORMAT, "version": INDEX_VERSION,
                  "samples_per_block": BLOCK_SAMPLES,
                  "tars": {f.name: e for f, e in zip(self.files, entries, strict=True)}}  # fmt: skip
        raw = json.dumps(record).encode()
        try:
            if self.cache_dir is not None:
                partial = Path(f"{where}.{os.getpid()}.partial")
                partial.parent.mkdir(parents=True, exist_ok=True)
                partial.write_bytes(raw)
                os.replace(partial, where)
            else:
                self.fs.pipe_file(self.path(self._index_name()), raw)
        except Exception as err:  # noqa: BLE001 - a read-only bucket or disk: not fatal
            log.warning("the index of %s cannot be kept at %s (%s): each start scans the tars "
                        "again; set data.cache_dir to keep it locally", redact_url(self.url),
                        redact_url(where), type(err).__name__)  # fmt: skip

    def _check_columns(self, name: str, entry: dict[str, Any]) -> None:
        """Each extension `columns` names in every sample of the tar, before training."""
        for kind, (count, first) in entry["kinds"].items():
            has = kind.split(",") if kind else []
            missing = [c for c in self.columns.names if c not in has]
            if missing:
                raise self.damaged(name, f"{count} sample(s) have no .{missing[0]} member, the "
                                   f"first {first!r} (it has: {', '.join(has) or 'nothing'}): a "
                                   "member without its pair, or data.columns names another")  # fmt: skip

    # -- blocks ---------------------------------------------------------------------------

    def _decode(self, file: int, block: int, ahead: bytes | None = None) -> list[Any]:
        name = self.files[file].name
        start, end, digest = self.tars[file]["blocks"][block]
        key = self._block_key(file, block)
        data = ahead
        if data is None and self._cache is not None:
            data = self._cache.get(key)
            if data is not None and (len(data) != end - start or tar.block_digest(data) != digest):
                self._cache.drop(key)  # another writer's, or a damaged disk: read again
                data = None
        if data is None:
            got = self.fetch_run(file, block, block)[block]
            if isinstance(got, DamagedShards):
                raise got
            data = got
        expected = min(BLOCK_SAMPLES, self.counts[file] - block * BLOCK_SAMPLES)
        try:
            samples = tar.samples_in(data, expected)
            return [self._sample(key_, members) for key_, members in samples]
        except (Damaged, ValueError) as err:
            raise self.damaged(name, f"block {block}: {err}") from None

    # -- what the read-ahead asks (readahead.RangeSource) ------------------------------

    def learn_spans(self, files: list[int], pool: ThreadPoolExecutor) -> None:
        """Known from the index already."""

    def span(self, file: int, block: int) -> tuple[int, int]:
        start, end, _ = self.tars[file]["blocks"][block]
        return start, end

    def cached(self, file: int, block: int) -> bool:
        return self._cache is not None and self._cache.has(self._block_key(file, block))

    def fetch_run(self, file: int, first: int, last: int) -> dict[int, bytes | DamagedShards]:
        """Blocks `first`..`last` of tar `file` in one range read, each checked against its
        digest (a mismatch is its one line, raised when that block is taken) and cached.
        A run to the tar's last block takes the tar header after it too, which must be the
        end of the archive (an index cut short there would drop samples)."""
        name, blocks = self.files[file].name, self.tars[file]["blocks"]
        start, end = blocks[first][0], blocks[last][1]
        if last < len(blocks) - 1:
            raw = self.read(file, start, end)
        else:
            raw = self.read(file, start, min(end + tar.BLOCK, self.files[file].bytes))
            if raw[end - start :] != bytes(tar.BLOCK):
                raise self.damaged(name, f"no end of the archive at byte {end}, where "
                                   f"{self._shown_index()} says its last sample ends (delete "
                                   "that index to read the tar as it is now)")  # fmt: skip

        def damage(block: int, piece: bytes) -> DamagedShards | None:
            a, b, digest = blocks[block]
            if tar.block_digest(piece) == digest:
                return None
            return self.damaged(name, f"block {block} (bytes {a}-{b}) does not match its "
                                "digest in the index (changed since it was indexed?)")  # fmt: skip

        return split_run(raw, start, range(first, last + 1), lambda b: blocks[b][:2], damage,
                         lambda b: self._block_key(file, b), self._cache)  # fmt: skip

    def _block_key(self, file: int, block: int) -> str:
        return f"{self._cache_key}-{self.files[file].name}-{block}"

    def _sample(self, key: str, members: dict[str, bytes]) -> Any:
        wanted = self.columns.names or list(members)
        values: dict[str, Any] = {}
        for ext in wanted:
            if ext not in members:
                raise ValueError(f"sample {key!r} has no .{ext} member")
            try:
                values[ext] = decode_member(ext, members[ext])
            except ValueError as err:
                raise ValueError(f"sample {key!r}'s .{ext} {err}") from None
        if self.columns.shape == "all":
            values["__key__"] = key
        return self.columns.sample(values)


def _entry_ok(entry: Any) -> bool:
    """A kept entry of the right shape (anything else is rebuilt, never trusted)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("stamp"), str):
        return False
    counts = [entry.get(k) for k in ("bytes", "samples")]
    if not all(type(c) is int and c >= 0 for c in counts):
        return False
    blocks, kinds = entry.get("blocks"), entry.get("kinds")
    if not isinstance(blocks, list) or not isinstance(kinds, dict):
        return False
    if len(blocks) != -(-entry["samples"] // BLOCK_SAMPLES):
        return False
    at = 0  # the blocks tile the archive from byte 0, as the scan makes them: a sample
    # left between two blocks would never be read (the end is checked at the last read)
    for block in blocks:
        ok = isinstance(block, list) and len(block) == 3 and all(type(b) is int for b in block[:2])
        if (
            not ok
            or not isinstance(block[2], str)
            or not at == block[0] < block[1] <= entry["bytes"]
        ):
            return False
        at = block[1]
    return all(isinstance(v, list) and len(v) == 2 and type(v[0]) is int for v in kinds.values())
