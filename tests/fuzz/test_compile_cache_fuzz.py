"""The compile cache's reader (fetch, verify, unpack) on damaged archives and signatures:
the archive's files exactly, or one ArchiveRefused line naming the archive; a missing
archive is "none yet". Then the tar layer alone, on damaged archives re-signed as if by a
key holder: plain files under the cache or one line, never a traceback or a file outside."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from litforge.checkpointing.store import CheckpointStore
from litforge.compile_cache.archive import (
    ArchiveRefused,
    fetch_verified,
    signature,
    unpack,
)
from tests.fuzz.damage import damaged_copies

NAME = "compile-cache/torch-2.0-x86_64.tar"
KEY = b"a-fuzz-key-of-32-characters-0001"
LIMIT = 10**6
FILES = {  # the shapes of inductor's cache: nested folders, code, binaries
    "inductor/fxgraph/ab/fabc/entry": bytes(range(256)) * 3,
    "inductor/ab/cabc.py": b"def call(args):\n    return args\n" * 20,
    "inductor/ab/cabc.so": b"\x7fELF" + bytes(700),
    "inductor/aotautograd/xy/entry": b"{}",
}


def archive_bytes() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in FILES.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def cached(root: Path) -> dict[str, bytes]:
    return {
        f"inductor/{p.relative_to(root).as_posix()}": p.read_bytes()
        for p in root.rglob("*")
        if p.is_file()
    }


def read(store_dir: Path, work: Path) -> dict[str, bytes] | None:
    """What a fresh machine's cache holds after the fetch; None: no archive there."""
    store = CheckpointStore(str(store_dir))
    local, root = work / "fetched.tar", work / "cache"
    try:
        fetch_verified(store, NAME, KEY, local, LIMIT)
    except FileNotFoundError:
        return None
    unpack(local, {"inductor": root}, LIMIT, f"{store}/{NAME}")
    return cached(root)


def put(path: Path, data: bytes | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if data is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("damaged", ["archive", "signature"])
def test_a_damaged_archive_or_signature_is_its_files_or_one_line(tmp_path, damaged):
    good = tmp_path / "good.tar"
    good.write_bytes(archive_bytes())
    sig = signature(KEY, NAME, good).encode()
    store_dir = tmp_path / "store"
    original = good.read_bytes() if damaged == "archive" else sig
    for index, (label, data) in enumerate(damaged_copies(original, seed=7, count=60)):
        put(store_dir / NAME, data if damaged == "archive" else good.read_bytes())
        put(store_dir / f"{NAME}.sig", data if damaged == "signature" else sig)
        work = tmp_path / f"case-{index}"
        work.mkdir()
        try:
            got = read(store_dir, work)
        except ArchiveRefused as err:
            assert str(err).startswith(f"{store_dir}/{NAME}"), (label, str(err))
            assert "\n" not in str(err)
            assert not (work / "cache").exists() or not cached(work / "cache"), label
            continue
        if got is None:  # no archive: the run compiles and saves one
            assert damaged == "archive" and data is None, label
        else:  # only undamaged bytes get here (a flip of a byte to itself is no damage)
            assert got == FILES, label


def test_the_tar_layer_takes_anything_a_key_holder_could_sign(tmp_path):
    original = archive_bytes()
    where = "s3://bucket/run/" + NAME
    for index, (label, data) in enumerate(damaged_copies(original, seed=11, count=120)):
        if data is None:
            continue
        work = tmp_path / f"case-{index}"
        work.mkdir()
        archive = work / "a.tar"
        archive.write_bytes(data)
        try:
            added = unpack(archive, {"inductor": work / "cache"}, LIMIT, where)
        except ArchiveRefused as err:
            assert str(err).startswith(where) and "\n" not in str(err), (label, str(err))
            assert not (work / "cache").exists() or not cached(work / "cache"), label
            continue
        got = cached(work / "cache") if (work / "cache").exists() else {}
        assert len(got) == added, label
        # Every file lies inside the cache (damage inside a member's data is the
        # signature's to catch, above), and no staging folder is left behind.
        stray = [p for p in work.rglob("*") if p.is_file() and p != archive]
        assert all(p.is_relative_to(work / "cache") for p in stray), (label, stray)
        assert not list((work / "cache").glob(".litforge-unpack-*")), label
