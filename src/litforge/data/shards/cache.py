"""A bounded local cache of block bytes, shared by a run's processes (files in one
directory). Written as a temporary file and renamed, so a process killed mid-write
leaves no half block a later run could read; the oldest blocks go past `max_bytes`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class BlockCache:
    def __init__(self, directory: str | Path, max_bytes: int) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        for stale in self.dir.glob("*.partial"):  # a writer killed mid-block (kill -9)
            stale.unlink(missing_ok=True)

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.blk"

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        os.utime(path)  # recently used: evicted last
        return data

    def put(self, key: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".partial")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, self._path(key))
        self._evict()

    def _evict(self) -> None:
        entries = []
        for path in self.dir.glob("*.blk"):
            try:
                stat = path.stat()
            except OSError:
                continue  # evicted by another process meanwhile
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.dir.glob("*.blk") if p.exists())
