"""Uploader: order, retries of failed uploads, the end-of-run error, the background worker.

Outages are test doubles (a store whose `upload` raises or blocks); the real S3 outage
paths are covered by test_store.py and test_s3_runs.py.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from litforge.checkpointing import uploader as uploader_module
from litforge.checkpointing.store import CheckpointStore, Manifest, checkpoint_name, sha256_of
from litforge.checkpointing.uploader import Uploader, UploadsPending
from litforge.errors import LitforgeError

WAIT_S = 10.0  # generous bound on anything that should happen at once


class FlakyStore(CheckpointStore):
    """A local store that is down for its first `failures` upload calls."""

    def __init__(self, url: str, failures: int = 0) -> None:
        super().__init__(url)
        self.failures = failures
        self.calls: list[str] = []  # names, one per upload call
        self.threads: set[str] = set()

    def upload(self, local: Path, manifest: Manifest) -> None:
        self.calls.append(manifest.name)
        self.threads.add(threading.current_thread().name)
        if len(self.calls) <= self.failures:
            raise ConnectionError(f"store down (call {len(self.calls)})")
        super().upload(local, manifest)


class BlockingStore(CheckpointStore):
    """A local store whose uploads wait until `release` is set."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls: list[str] = []

    def upload(self, local: Path, manifest: Manifest) -> None:
        self.calls.append(manifest.name)
        self.started.set()
        if not self.release.wait(WAIT_S):
            raise TimeoutError("test never released the store")
        super().upload(local, manifest)


def staged(tmp_path: Path, step: int) -> tuple[Path, Manifest]:
    local = tmp_path / "staging" / checkpoint_name(step)
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(f"checkpoint {step}".encode())
    return local, Manifest(local.name, step, local.stat().st_size, sha256_of(local))


def committed(store: CheckpointStore) -> list[str]:
    return [m.name for m in store.manifests()]


@pytest.fixture
def store_url(tmp_path) -> str:
    CheckpointStore(str(tmp_path / "store")).check_access()  # creates the directory
    return str(tmp_path / "store")


def test_sync_upload_commits_then_calls_after_commit_once(tmp_path, store_url):
    store = CheckpointStore(store_url)
    seen: list[tuple[Manifest, list[str]]] = []
    local, manifest = staged(tmp_path, 10)
    up = Uploader(store, retries=1, backoff_s=0)
    # after_commit sees the marker already written
    up.submit(local, manifest, after_commit=lambda m: seen.append((m, committed(store))))
    assert seen == [(manifest, [manifest.name])]
    assert up.pending() == []
    assert local.exists()  # a local store keeps the staged copy
    up.flush(0)
    up.close()
    assert len(seen) == 1


def test_failed_upload_is_retried_first_on_next_submit(tmp_path, store_url):
    store = FlakyStore(store_url, failures=2)
    commits: list[str] = []
    up = Uploader(store, retries=2, backoff_s=0)
    a, b = staged(tmp_path, 1), staged(tmp_path, 2)

    up.submit(*a, after_commit=lambda m: commits.append(m.name))
    assert up.pending() == [a[0]]
    assert store.calls == [a[1].name] * 2  # `retries` attempts, then left staged
    assert commits == [] and committed(store) == []

    up.submit(*b, after_commit=lambda m: commits.append(m.name))
    assert store.calls == [a[1].name] * 3 + [b[1].name]  # the old job first
    assert commits == [a[1].name, b[1].name]
    assert committed(store) == [a[1].name, b[1].name]
    assert up.pending() == []


def test_flush_names_every_local_copy_not_uploaded(tmp_path, store_url):
    store = FlakyStore(store_url, failures=10**6)
    up = Uploader(store, retries=1, backoff_s=0.01)
    a, b = staged(tmp_path, 1), staged(tmp_path, 2)
    up.submit(*a)
    up.submit(*b)
    assert up.pending() == [a[0], b[0]]

    with pytest.raises(UploadsPending, match="still unreachable") as err:
        up.flush(0.2)
    assert isinstance(err.value, LitforgeError)
    assert str(a[0]) in str(err.value) and str(b[0]) in str(err.value)
    assert up.pending() == [a[0], b[0]]  # still listed, still on disk
    assert a[0].exists() and b[0].exists()
    assert len(store.calls) > 3  # flush retried them
    up.close()


def test_flush_retries_until_the_store_is_back(tmp_path, store_url):
    store = FlakyStore(store_url, failures=3)
    up = Uploader(store, retries=1, backoff_s=0.01)
    a = staged(tmp_path, 1)
    up.submit(*a)
    assert up.pending() == [a[0]]
    up.flush(WAIT_S)
    assert up.pending() == [] and committed(store) == [a[1].name]


def test_non_local_store_deletes_the_staged_copy_after_upload(tmp_path):
    store = CheckpointStore(f"memory://litforge-test-{uuid.uuid4().hex}")
    assert not store.is_local
    local, manifest = staged(tmp_path, 5)
    up = Uploader(store, retries=1, backoff_s=0)
    up.submit(local, manifest)
    assert committed(store) == [manifest.name]
    assert not local.exists()


def test_background_uploads_in_order_on_the_worker_and_flush_waits(tmp_path, store_url):
    store = BlockingStore(store_url)
    commits: list[str] = []
    up = Uploader(store, background=True, retries=1, backoff_s=0)
    jobs = [staged(tmp_path, s) for s in (1, 2, 3)]
    try:
        for local, manifest in jobs:
            up.submit(local, manifest, after_commit=lambda m: commits.append(m.name))
        assert store.started.wait(WAIT_S)
        assert commits == []  # submit did not wait
        threading.Timer(0.2, store.release.set).start()
        up.flush(WAIT_S)
        assert commits == [m.name for _, m in jobs]  # flush returned after all of them
        assert store.calls == [m.name for _, m in jobs]
        assert committed(store) == [m.name for _, m in jobs]
    finally:
        store.release.set()
        up.close()


def test_background_retries_the_failed_job_first(tmp_path, store_url):
    store = FlakyStore(store_url, failures=1)
    commits: list[str] = []
    up = Uploader(store, background=True, retries=1, backoff_s=0)
    a, b = staged(tmp_path, 1), staged(tmp_path, 2)
    try:
        up.submit(*a, after_commit=lambda m: commits.append(m.name))
        up.submit(*b, after_commit=lambda m: commits.append(m.name))
        up.flush(WAIT_S)
    finally:
        up.close()
    assert store.calls == [a[1].name, a[1].name, b[1].name]
    assert commits == [a[1].name, b[1].name]
    assert store.threads and all(t.startswith("litforge-upload") for t in store.threads)


def test_background_flush_names_failed_uploads(tmp_path, store_url):
    store = FlakyStore(store_url, failures=10**6)
    up = Uploader(store, background=True, retries=2, backoff_s=0.01)
    a, b = staged(tmp_path, 1), staged(tmp_path, 2)
    try:
        up.submit(*a)
        up.submit(*b)
        deadline = time.monotonic() + WAIT_S
        while len(up.pending()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # both tried on the worker: flush finds it idle
        with pytest.raises(UploadsPending, match="still unreachable") as err:
            up.flush(0.2)
    finally:
        up.close()
    assert str(a[0]) in str(err.value) and str(b[0]) in str(err.value)
    assert up.pending() == [a[0], b[0]]


def test_flush_timeout_while_the_worker_is_busy_names_the_in_flight_file(tmp_path, store_url):
    store = BlockingStore(store_url)
    up = Uploader(store, background=True, retries=1, backoff_s=0)
    a, b = staged(tmp_path, 1), staged(tmp_path, 2)
    try:
        up.submit(*a)
        assert store.started.wait(WAIT_S)
        up.submit(*b)
        start = time.monotonic()
        with pytest.raises(UploadsPending, match="did not finish within") as err:
            up.flush(0.2)
        assert time.monotonic() - start < WAIT_S / 2
        assert str(a[0]) in str(err.value)  # in flight
        assert str(b[0]) in str(err.value)  # queued behind it
    finally:
        store.release.set()
        up.close()


def test_after_commit_error_on_the_worker_surfaces_at_flush(tmp_path, store_url):
    store = CheckpointStore(store_url)
    up = Uploader(store, background=True, retries=1, backoff_s=0)
    a = staged(tmp_path, 1)

    def broken(manifest: Manifest) -> None:
        raise ValueError("cleanup bug")

    try:
        up.submit(*a, after_commit=broken)
        with pytest.raises(ValueError, match="cleanup bug"):
            up.flush(WAIT_S)
        up.flush(WAIT_S)  # reported once; the upload itself is done
    finally:
        up.close()
    assert up.pending() == [] and committed(store) == [a[1].name]


def test_close_is_idempotent_and_does_not_hang(tmp_path, store_url, monkeypatch):
    monkeypatch.setattr(uploader_module, "_CLOSE_WAIT_S", 0.1)
    sync = Uploader(CheckpointStore(store_url))
    sync.close()
    sync.close()

    idle = Uploader(CheckpointStore(store_url), background=True)
    idle.close()
    idle.close()

    # A blocked upload in flight and one queued behind it.
    store = BlockingStore(store_url)
    busy = Uploader(store, background=True, retries=1, backoff_s=0)
    a, b = staged(tmp_path, 1), staged(tmp_path, 2)
    try:
        busy.submit(*a)
        assert store.started.wait(WAIT_S)
        busy.submit(*b)
        start = time.monotonic()
        busy.close()
        busy.close()
        assert time.monotonic() - start < WAIT_S / 2
    finally:
        store.release.set()
    busy._executor.shutdown(wait=True)  # the in-flight upload finishes...
    assert store.calls == [a[1].name]  # ...and the queued one was dropped
    assert b[0].exists()
    with pytest.raises(RuntimeError, match="closed"):
        busy.submit(*b)


def test_close_ends_backoff_and_retries_at_once(tmp_path, store_url):
    store = FlakyStore(store_url, failures=10**6)
    up = Uploader(store, background=True, retries=2, backoff_s=WAIT_S)
    a = staged(tmp_path, 1)
    up.submit(*a)
    deadline = time.monotonic() + WAIT_S
    while not store.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    up.close()
    up._executor.shutdown(wait=True)  # the worker has stopped
    assert time.monotonic() - start < WAIT_S / 2
    assert store.calls == [a[1].name]  # no attempt after close
    assert up.pending() == [a[0]]
