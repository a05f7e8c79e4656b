"""Device leases across the processes of one machine: two sweeps never put trials on one
device at once.

One lock file per device under hydra.launcher.lease_dir, taken with flock(2) while this
sweep has a trial on the device. The kernel lets go of a lock when its holder dies, so a
killed sweep leaves no stale lease. The files are anyone's to create: only the lock counts.
Their content is never read, a name that is not a plain file (a symlink, a fifo) is
refused, and who holds a lock comes from the kernel (/proc/locks), not from the file.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import stat
from pathlib import Path

from litforge.errors import ConfigError

log = logging.getLogger("litforge")


class Leases:
    """The locks this sweep holds, by device key (a GPU's UUID, else its id)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fds: dict[str, int] = {}
        self.users: dict[str, int] = {}  # this sweep's trials on each held device
        self._ready = False

    def try_hold(self, key: str) -> bool:
        """Whether this sweep holds `key` now (taking it if it is free)."""
        if key in self.fds:
            return True
        fd = self._open(key)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise ConfigError(f"{self._path(key)}: cannot lock it: {err.strerror}") from None
        self.fds[key] = fd
        return True

    def use(self, keys: list[str]) -> None:
        for key in keys:
            self.users[key] = self.users.get(key, 0) + 1

    def done(self, keys: list[str]) -> None:
        for key in keys:
            self.users[key] = self.users.get(key, 1) - 1
        self.release_idle()

    def release_idle(self) -> None:
        """Let go of every held device no trial of this sweep is on."""
        for key in [k for k in self.fds if self.users.get(k, 0) <= 0]:
            os.close(self.fds.pop(key))  # closing the only descriptor drops the lock

    def release_all(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def holder(self, key: str) -> str:
        """Who holds `key`'s lock, as the kernel says: 'pid N (command)', or ''."""
        try:
            info = os.stat(self._path(key), follow_symlinks=False)
            with open("/proc/locks") as table:
                lines = table.read().splitlines()
        except OSError:
            return ""
        for line in lines:
            fields = line.split()
            if len(fields) < 6 or fields[1] != "FLOCK" or fields[0].endswith("->"):
                continue
            pid, where = fields[4], fields[5].split(":")
            if len(where) == 3 and where[2] == str(info.st_ino) and pid.isdigit():
                return f"pid {pid}{_command(int(pid))}"
        return ""

    def _path(self, key: str) -> Path:
        return self.directory / f"device-{re.sub(r'[^A-Za-z0-9._-]', '_', key)}.lock"

    def _open(self, key: str) -> int:
        self._prepare()
        path = self._path(key)
        flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a fifo must not block the open
        try:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o666)
            except PermissionError:  # another user's file in a sticky directory: read it
                fd = os.open(path, os.O_RDONLY | flags)
        except OSError as err:
            why = "a symlink" if err.errno == errno.ELOOP else err.strerror
            raise ConfigError(
                f"{path}: cannot open this device lease ({why}); give "
                "hydra.launcher.lease_dir a directory of your own on local disk"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError(
                f"{path}: not a plain file, so not a device lease of litforge's; remove it or "
                "give hydra.launcher.lease_dir another directory"
            )
        return fd

    def _prepare(self) -> None:
        """The lease directory, made open to every user of the machine (like /tmp)."""
        if self._ready:
            return
        directory = self.directory
        try:
            directory.mkdir(parents=True)
            directory.chmod(0o1777)  # each user's sweeps add their own lock files
        except FileExistsError:
            pass
        except OSError as err:
            raise ConfigError(
                f"hydra.launcher.lease_dir={directory}: cannot create it ({err.strerror})"
            ) from None
        if directory.is_symlink() or not directory.is_dir():
            raise ConfigError(
                f"hydra.launcher.lease_dir={directory}: not a directory; give a directory on "
                "this machine's local disk for the device leases"
            )
        self._ready = True


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    words = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return f": {words[:80]}" if words else ""
