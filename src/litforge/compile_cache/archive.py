"""The compile cache's archive as data from a bucket: signed by a key the bucket does not
hold, fetched within a size limit, verified before any byte of it is unpacked, and unpacked
as plain files only.

Inductor imports the `.py` files of its cache, so an archive is code this machine will run.
Write access to the bucket alone must not be enough to run code: an archive is used only
when its HMAC-SHA256 signature (beside it, `<archive>.sig`) verifies with the key from
`LITFORGE_COMPILE_CACHE_KEY` or the local file `compile.cache_key_file`. The signed message
includes the archive's name (torch version and card), so a valid archive cannot be replayed
under another card's or torch's name. Without a key nothing is fetched or uploaded: an
unsigned archive could never be used.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from litforge.compiling_settings import CompileSettings
from litforge.errors import ConfigError, LitforgeError

KEY_ENV = "LITFORGE_COMPILE_CACHE_KEY"
MIN_KEY_CHARS = 16
SIGNATURE_SUFFIX = ".sig"
DEFAULT_MAX_BYTES = CompileSettings.cache_max_bytes  # compile.cache_max_bytes's default
_SCHEME = "litforge-compile-cache-hmac-sha256-v1"
_MAX_SIGNATURE_BYTES = 512
_CHUNK = 2**20
PLAIN_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)  # not sparse, links or devices


class Store(Protocol):
    """Where the archives go: the run's checkpoint store (litforge.checkpointing's
    `CheckpointStore`), named as a URL with its credentials cut by `str()`."""

    @property
    def fs(self) -> Any: ...  # its fsspec filesystem

    @property
    def is_local(self) -> bool: ...

    @property
    def timeout_s(self) -> float | None: ...

    def path(self, name: str) -> str: ...


class ArchiveRefused(LitforgeError):
    """An archive that is not used; the message names it and says why (never fatal: the
    run compiles instead)."""


NO_KEY = (
    f"compile cache: off, no key: an archive in the bucket is code this machine would run, so "
    f"litforge uses only archives signed with a key you hold. Set {KEY_ENV} (e.g. the output of "
    "`openssl rand -hex 32`, the same on every machine of the run) or "
    "compile.cache_key_file=PATH to carry inductor's caches; compile.cache=false silences this"
)


def load_key(key_file: str | None) -> bytes | None:
    """The signing key: `key_file`'s content (stripped) when set, else the environment's;
    None when neither is set. A key file that cannot be read, or a key too short, is one
    ConfigError naming where it came from (never its value)."""
    if key_file:
        where = f"compile.cache_key_file={key_file}"
        try:
            key = Path(key_file).expanduser().read_bytes().strip()
        except OSError as err:
            raise ConfigError(f"{where} cannot be read ({err.strerror or err}); it must be "
                              "a local file holding the compile-cache key") from None  # fmt: skip
    else:
        where = f"the environment variable {KEY_ENV}"
        key = os.environ.get(KEY_ENV, "").strip().encode()
        if not key:
            return None
    if len(key) < MIN_KEY_CHARS:
        raise ConfigError(
            f"{where}: the compile-cache key is {len(key)} characters; use at least "
            f"{MIN_KEY_CHARS} (e.g. the output of `openssl rand -hex 32`)"
        )
    return key


def signature(key: bytes, name: str, archive: Path) -> str:
    """The signature of the archive at `archive` stored as `name` (relative to the
    checkpoint directory): HMAC-SHA256 over the scheme, the name and the bytes."""
    mac = hmac.new(key, f"{_SCHEME}\n{name}\n".encode(), hashlib.sha256)
    with archive.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            mac.update(chunk)
    return f"{_SCHEME} {mac.hexdigest()}\n"


def _read_bounded(store: Store, name: str, local: Path, limit: int) -> None:
    """Download `name` to `local`, refusing it past `limit` bytes: by its listed size
    first, and counted while it streams (a listing can be stale)."""
    where = f"{store}/{name}"
    size = store.fs.size(store.path(name))
    if size is not None and size > limit:
        raise ArchiveRefused(f"{where} is {size} bytes, over compile.cache_max_bytes={limit}")
    got = 0
    with store.fs.open(store.path(name), "rb") as source, local.open("wb") as target:
        while chunk := source.read(min(_CHUNK, limit + 1 - got)):
            got += len(chunk)
            if got > limit:
                raise ArchiveRefused(f"{where} is over compile.cache_max_bytes={limit} bytes")
            target.write(chunk)


def fetch_verified(store: Store, name: str, key: bytes, local: Path, max_bytes: int) -> None:
    """`name` from `store` at `local`, only when its signature verifies with `key`.

    FileNotFoundError: there is no archive. ArchiveRefused: one line naming the archive
    and why it is not used (too big, unsigned, signed by another key or damaged)."""
    where = f"{store}/{name}"
    try:
        with store.fs.open(store.path(name + SIGNATURE_SUFFIX), "rb") as stream:
            signed = stream.read(_MAX_SIGNATURE_BYTES)
    except FileNotFoundError:
        if not store.fs.exists(store.path(name)):
            raise
        raise ArchiveRefused(f"{where} has no signature ({name}{SIGNATURE_SUFFIX}); not "
                             "used, as it could have been written by anyone") from None  # fmt: skip
    _read_bounded(store, name, local, max_bytes)
    expected = signature(key, name, local).encode()
    if not hmac.compare_digest(signed, expected):
        raise ArchiveRefused(
            f"{where} does not match its signature (damaged, replaced, or signed with another "
            f"{KEY_ENV}); not used"
        )


def _member_path(member: tarfile.TarInfo, roots: dict[str, Path], where: str) -> Path:
    """Where a member goes: a plain file under one of `roots`, never outside it."""
    if member.type not in PLAIN_FILE_TYPES:
        raise ArchiveRefused(f"{where}: member {member.name!r} is not a plain file")
    parts = PurePosixPath(member.name).parts
    if (
        len(parts) < 2
        or parts[0] not in roots
        or member.name.startswith("/")
        or any(p in ("", ".", "..") or "\\" in p for p in parts)
    ):
        raise ArchiveRefused(f"{where}: member {member.name!r} would land outside the cache")
    return roots[parts[0]].joinpath(*parts[1:])


def unpack(archive: Path, roots: dict[str, Path], max_bytes: int, where: str = "") -> int:
    """Put the archive's files into `roots`, each whole (a rename) and none over an existing
    file; returns how many it added. Only an uncompressed tar of plain files, all landing
    under `roots`, their sizes summing to at most `max_bytes`: anything else is an
    ArchiveRefused naming `where` (the archive's URL), and nothing is added."""
    where = where or str(archive)
    spare = {prefix: root / f".litforge-unpack-{os.getpid()}" for prefix, root in roots.items()}
    staged: list[tuple[Path, Path]] = []
    try:
        with tarfile.open(archive, mode="r:") as tar:  # "r:": gzip, bz2 or xz are refused
            members = tar.getmembers()
            total = sum(m.size for m in members)
            if total > max_bytes:
                raise ArchiveRefused(f"{where} unpacks to {total} bytes, over "
                                     f"compile.cache_max_bytes={max_bytes}")  # fmt: skip
            for index, member in enumerate(members):
                target = _member_path(member, roots, where)
                prefix = PurePosixPath(member.name).parts[0]
                spare[prefix].mkdir(parents=True, exist_ok=True)
                temporary = spare[prefix] / f"{index}.tmp"
                source = tar.extractfile(member)
                assert source is not None  # a plain file always has its data
                with temporary.open("wb") as file:
                    shutil.copyfileobj(source, file)
                if temporary.stat().st_size != member.size:
                    raise ArchiveRefused(f"{where}: member {member.name!r} is cut short")
                staged.append((temporary, target))
        added = 0
        for temporary, target in staged:  # all checked and written: now put them in place
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(temporary, target)
                added += 1
        return added
    except (tarfile.TarError, EOFError, UnicodeError, ValueError) as err:
        raise ArchiveRefused(f"{where} is not a readable tar of plain files ({err})") from None
    finally:
        for folder in spare.values():
            shutil.rmtree(folder, ignore_errors=True)
