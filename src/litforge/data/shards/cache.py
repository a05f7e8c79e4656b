"""A bounded local cache of block bytes, shared by a run's processes (files in one
directory). Written as a temporary file and renamed, so a process killed mid-write
leaves no half block a later run could read; the oldest blocks go past `max_bytes`.

A cache, not a requirement: a directory that cannot be made or written (read-only, a
full disk) is one warning per directory and process, then reading goes on without it.
What it holds may have been written by anyone sharing the directory, so the reader checks
each block it gets from here against the shard's digest and drops a bad one (`drop`).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("litforge")
_WARNED: set[str] = set()  # directories already warned about in this process
_TOUCH_S = 60.0


def _alive(pid: str) -> bool:
    """Whether process `pid` (a .partial file's prefix) still runs on this machine."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, OverflowError, ProcessLookupError):
        return False
    except PermissionError:
        return True  # another user's
    return True


class BlockCache:
    def __init__(self, directory: str | Path, max_bytes: int) -> None:
        self.dir = Path(directory)
        self.max_bytes = max_bytes
        self.off = False  # set after a failed write: reads go on uncached
        self._lock = threading.Lock()  # read-ahead threads put at once
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            for stale in self.dir.glob("*.partial"):
                if not _alive(stale.name.split("-")[0]):  # its writer was killed (kill -9)
                    stale.unlink(missing_ok=True)
            fd, probe = self._partial()  # read-only shows here, before training starts
            os.close(fd)
            Path(probe).unlink(missing_ok=True)
        except OSError as err:
            self._give_up(err)

    def __getstate__(self) -> dict[str, Any]:  # to DataLoader workers: a lock of their own
        return {**self.__dict__, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def _give_up(self, err: OSError) -> None:
        self.off = True
        if str(self.dir) not in _WARNED:
            _WARNED.add(str(self.dir))
            why = err.strerror or type(err).__name__
            log.warning("data.cache_dir=%s cannot be written (%s): reading without a cache",
                        self.dir, why)  # fmt: skip

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.blk"

    def get(self, key: str) -> bytes | None:
        if self.off:
            return None
        # Plain os calls on a str path: a warm epoch reads every block from here, and
        # pathlib's joining and read_bytes took 3x these (34 against 13 us a block).
        try:
            fd = os.open(f"{self.dir}/{key}.blk", os.O_RDONLY)
        except OSError:
            return None
        try:
            stat = os.fstat(fd)
            data = os.read(fd, stat.st_size)
            # Recently used: evicted last. Touched at most once a minute: eviction is
            # least-recently-used to within that, for one write fewer per block read.
            if time.time() - stat.st_mtime > _TOUCH_S:
                os.utime(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        return data if len(data) == stat.st_size else None

    def drop(self, key: str) -> None:
        """Forget a cached block found damaged."""
        self._path(key).unlink(missing_ok=True)

    def has(self, key: str) -> bool:
        return not self.off and self._path(key).exists()

    def put(self, key: str, data: bytes) -> None:
        self.put_many([(key, data)])

    def put_many(self, items: list[tuple[str, bytes]]) -> None:
        """Each (key, bytes), the oldest evicted first to make room for them within
        `max_bytes`: once for a range's blocks, not once per block (each eviction lists the
        directory). The newest that fit are kept."""
        fit: list[tuple[str, bytes]] = []
        total = 0
        for key, data in reversed(items):
            if total + len(data) <= self.max_bytes:
                fit.append((key, data))
                total += len(data)
        fit.reverse()  # written oldest first, as they came
        if self.off or not fit:
            return
        try:
            with self._lock:
                self._evict(room=total)
                for key, data in fit:
                    self._write(key, data)
        except OSError as err:  # a full disk, a directory made read-only meanwhile
            self._give_up(err)

    def _write(self, key: str, data: bytes) -> None:
        """`data` at `key`'s path, whole or not at all (no .partial left on failure)."""
        fd, tmp = self._partial()
        try:
            view = memoryview(data)
            while view:  # os.write: a short write on a filling disk is not an error
                view = view[os.write(fd, view) :]
            os.close(fd)
            fd = -1
            os.replace(tmp, self._path(key))
        except BaseException:
            if fd >= 0:
                os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            raise

    def _partial(self) -> tuple[int, str]:
        return tempfile.mkstemp(dir=self.dir, prefix=f"{os.getpid()}-", suffix=".partial")

    def _evict(self, room: int = 0) -> None:
        """The oldest entries, until `room` more bytes fit within `max_bytes`."""
        entries = []
        for path in self.dir.glob("*.blk"):
            try:
                stat = path.stat()
            except OSError:
                continue  # evicted by another process meanwhile
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total + room <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size

    def size(self) -> int:
        total = 0
        for path in self.dir.glob("*.blk"):
            try:
                total += path.stat().st_size
            except OSError:
                continue  # evicted meanwhile
        return total
