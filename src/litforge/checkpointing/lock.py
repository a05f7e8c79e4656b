"""One run at a time per location: a lock file with its holder's host, pid and heartbeat.

Two processes started with the same run_name would otherwise resume from each other's
checkpoints and interleave their logs. The lock is a small JSON file (in the run
directory and beside the checkpoints in the store), rewritten every `heartbeat_s`.
It is taken over when its holder is gone: a dead pid on this host at once, any holder
whose heartbeat is older than `stale_s`. Object stores have no atomic create, so two
starts within the same second are told apart by reading the lock back after writing it.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from typing import Any

from litforge.checkpointing.direct_write import write_now
from litforge.errors import LitforgeError

log = logging.getLogger("litforge")
LOCK_NAME = ".litforge-lock"
_MAX_LOCK_BYTES = 4096


def holder_alive(holder: dict[str, Any], stale_s: float) -> bool:
    """Whether the process in `holder` ({host, pid, heartbeat}) may still be running: a fresh
    heartbeat from another host, or a live pid on this one (this very process counts as gone:
    it ran the same thing before, in-process tests and sweeps). A record whose heartbeat is
    not a number is a torn or changed file: nobody's."""
    heartbeat, pid = holder.get("heartbeat"), holder.get("pid", -1)
    # A heartbeat far in the future (beyond clock skew) is no more alive than an old one.
    if not _number(heartbeat) or abs(time.time() - heartbeat) > stale_s:
        return False
    if holder.get("host") != socket.gethostname():
        return True
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**31:
        return False  # os.kill(0 or -1, 0) would ask about a whole process group
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class RunLocked(LitforgeError):
    """Another live process holds this run; exit 75 (EX_TEMPFAIL: try again later)."""

    exit_code = 75


class RunLock:
    """`fs` is any fsspec filesystem, `path` the lock file in it, `where` its name for people."""

    def __init__(
        self,
        fs: Any,
        path: str,
        where: str,
        heartbeat_s: float = 30.0,
        stale_s: float = 120.0,
        timeout_s: float | None = None,
    ) -> None:
        self.fs, self.path, self.where = fs, path, where
        self.heartbeat_s, self.stale_s = heartbeat_s, stale_s
        self.timeout_s = timeout_s  # bound on release(): a store that hangs must not hold exit
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> dict[str, Any] | None:
        """Take the lock or raise RunLocked naming its live holder; returns the record of a
        holder that is gone whose lock this took over (the caller says so, once)."""
        holder = self._read()
        if holder is not None and holder.get("token") != self.token and self._alive(holder):
            raise RunLocked(self._describe(holder))
        gone = holder if holder is not None and holder.get("token") != self.token else None
        self._write()
        time.sleep(0.05)  # a rival that wrote at the same moment: the last write wins
        holder = self._read()
        if holder is None or holder.get("token") != self.token:
            raise RunLocked(self._describe(holder or {}))
        self._thread = threading.Thread(
            target=self._beat, name="litforge-lock-heartbeat", daemon=True
        )
        self._thread.start()
        return gone

    def release(self, wait_s: float | None = None) -> None:
        """Remove the lock if it is still ours; waits at most `timeout_s` (or `wait_s`, when
        shorter: a preempted run's grace period is nearly spent) for the store. A removal
        still pending then goes on in a daemon thread; a lock it leaves behind is taken
        over as stale. Once only: the call registered for interpreter exit is dropped."""
        if self._stop.is_set():
            return
        self._stop.set()
        atexit.unregister(self.release)
        if self.timeout_s is None and wait_s is None:
            self._remove()
            return
        thread = threading.Thread(target=self._remove, name="litforge-lock-release", daemon=True)
        thread.start()
        limits = [t for t in (self.timeout_s, wait_s) if t is not None]
        thread.join(max(0.0, min(limits)))

    def _remove(self) -> None:
        try:
            holder = self._read()
            if holder is not None and holder.get("token") == self.token:
                self.fs.rm_file(self.path)
        except Exception as err:  # noqa: BLE001 - a lock left behind expires by itself
            log.warning("could not remove the lock %s: %s", self.where, err)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self._write()
            except FileNotFoundError:
                return  # the location itself is gone (a failed start's run directory removed)
            except Exception as err:  # noqa: BLE001 - a store outage must not stop training
                log.warning("could not renew the lock %s: %s", self.where, err)

    def _write(self) -> None:
        record = {"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                  "heartbeat": time.time()}  # fmt: skip
        write_now(self.fs, self.path, json.dumps(record).encode())  # beats during saves

    def _read(self) -> dict[str, Any] | None:
        try:
            # A lock is under 200 bytes: a larger object is read in part and is nobody's.
            holder = json.loads(self.fs.cat_file(self.path, start=0, end=_MAX_LOCK_BYTES))
        except FileNotFoundError:
            return None
        except (ValueError, RecursionError):  # a torn write: treat it as nobody's
            log.warning("the lock %s is unreadable (a torn write?): treated as nobody's",
                        self.where)  # fmt: skip
            return None
        if not isinstance(holder, dict):
            log.warning("the lock %s is not a lock record: treated as nobody's", self.where)
            return None
        return holder

    def _alive(self, holder: dict[str, Any]) -> bool:
        return holder_alive(holder, self.stale_s)

    def _describe(self, holder: dict[str, Any]) -> str:
        return (
            f"{self.where} is in use by {holder_line(holder)}: another run with this "
            f"run_name is still going. Wait for it, or use another run_name; a lock whose "
            f"holder is gone is taken over ({self.stale_s:.0f} s after its last heartbeat)"
        )


def acquire_all(locks: list[RunLock]) -> list[RunLock]:
    """Take every lock (each released at exit), or none: a live holder of any raises
    RunLocked. Locks a run that is gone left are taken over with one line for all of them
    (they name the same process)."""
    gone: list[tuple[RunLock, dict[str, Any]]] = []
    for taken, lock in enumerate(locks):
        try:
            holder = lock.acquire()
        except RunLocked:
            for held in locks[:taken]:
                held.release()
            raise
        atexit.register(lock.release)
        if holder is not None:
            gone.append((lock, holder))
    if gone:
        log.warning(
            "a run that is gone (%s) left its lock on %s; this run takes it over",
            holder_line(gone[0][1]), " and ".join(lock.where for lock, _ in gone),
        )  # fmt: skip
    return locks


def holder_line(holder: dict[str, Any]) -> str:
    """`host H pid P (heartbeat N s ago)`: who a lock record names."""
    heartbeat = holder.get("heartbeat")
    age = f"{time.time() - heartbeat:.0f} s ago" if _number(heartbeat) else "unknown"
    return f"host {holder.get('host', '?')} pid {holder.get('pid', '?')} (heartbeat {age})"
