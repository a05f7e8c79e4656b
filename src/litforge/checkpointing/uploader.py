"""Staged checkpoint files -> the store, with retries, optionally on a background thread.

Training never waits on a store that is down: a failed upload stays staged on local disk
and is retried before the next one (and with backoff in the background mode). Only at
the end of training is a store that is still unreachable an error, naming the local copies.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from litforge.checkpointing.store import CheckpointStore, Manifest

log = logging.getLogger("litforge")


class UploadsPending(RuntimeError):
    """The store stayed unreachable: these checkpoints exist only on local disk."""


@dataclass
class _Job:
    local: Path
    manifest: Manifest
    after_commit: Callable[[Manifest], None] | None = None


class Uploader:
    def __init__(
        self,
        store: CheckpointStore,
        background: bool = False,
        retries: int = 3,
        backoff_s: float = 1.0,
    ) -> None:
        self.store = store
        self.background = background
        self.retries = retries
        self.backoff_s = backoff_s
        self._pending: list[_Job] = []  # failed jobs, oldest first (guarded by _lock)
        self._queued: list[_Job] = []  # handed to the background thread, not yet tried
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._work, name="litforge-upload", daemon=True)
            self._thread.start()

    def submit(self, local: Path, manifest: Manifest, after_commit=None) -> None:
        """Upload `local` as `manifest.name`; `after_commit` runs once its marker exists."""
        job = _Job(local, manifest, after_commit)
        if self.background:
            self._idle.clear()
            with self._lock:
                self._queued.append(job)
            self._queue.put(job)
        else:
            self._retry_pending()
            self._first_try(job)

    def pending(self) -> list[Path]:
        with self._lock:
            return [job.local for job in self._pending]

    def flush(self, timeout_s: float) -> None:
        """Wait for queued uploads and retry failed ones until `timeout_s`; raise if any remain."""
        deadline = time.monotonic() + timeout_s
        if self.background and not self._idle.wait(timeout=timeout_s):
            # The worker is still busy: report what it has not finished rather than
            # letting the process exit under a half-done upload.
            with self._lock:
                left = [job.local for job in self._queued + self._pending]
            raise UploadsPending(
                f"uploads to {self.store} did not finish within {timeout_s:.0f} s; kept "
                f"locally: {', '.join(str(p) for p in left)}"
            )
        delay = self.backoff_s
        while self.pending() and time.monotonic() < deadline:
            self._retry_pending()
            if self.pending():
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 30.0)
        left = self.pending()
        if left:
            raise UploadsPending(
                f"the checkpoint store {self.store} is still unreachable; not uploaded, kept "
                f"locally: {', '.join(str(p) for p in left)}"
            )

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._retry_pending()
            self._first_try(job)
            with self._lock:
                self._queued.remove(job)
            if self._queue.empty():
                self._idle.set()

    def _first_try(self, job: _Job) -> None:
        error = self._upload(job, attempts=self.retries)
        if error is None:
            return
        with self._lock:
            self._pending.append(job)
        log.warning(
            "checkpoint %s not uploaded to %s yet (%s); kept at %s, will retry",
            job.manifest.name, self.store, error, job.local,
        )  # fmt: skip

    def _retry_pending(self) -> None:
        # A job stays listed in _pending until it succeeds, so flush() can always name it.
        with self._lock:
            jobs = list(self._pending)
        for job in jobs:
            if self._upload(job, attempts=1) is None:
                with self._lock:
                    self._pending.remove(job)

    def _upload(self, job: _Job, attempts: int) -> str | None:
        """Up to `attempts` tries with backoff; None on success, else the last error."""
        delay = self.backoff_s
        error = ""
        for attempt in range(attempts):
            try:
                self.store.upload(job.local, job.manifest)
            except Exception as err:  # noqa: BLE001 - any backend error means "not uploaded"
                error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                if attempt + 1 < attempts:
                    time.sleep(delay)
                    delay *= 2
                continue
            if not self.store.is_local:
                job.local.unlink(missing_ok=True)
            if job.after_commit is not None:
                job.after_commit(job.manifest)
            return None
        return error
