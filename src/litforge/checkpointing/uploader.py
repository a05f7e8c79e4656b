"""Staged checkpoint files -> the store, with retries, optionally on a background thread.

Training never waits on a store that is down: a failed upload stays staged on local disk
and is retried before the next one (and with backoff in the background mode). Only at
the end of training is a store that is still unreachable an error, naming the local copies.

Retry policy: this layer retries *whole uploads* (file, then its completeness marker) across
outages; transient request errors are retried inside one attempt by the filesystem itself
(s3fs's `_error_wrapper`, botocore's retry handler), tuned only through `storage_options`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from litforge.checkpointing.store import CheckpointStore, Manifest, remove
from litforge.errors import LitforgeError

log = logging.getLogger("litforge")

_CLOSE_WAIT_S = 5.0  # close(): how long an upload already in flight may still take


class UploadsPending(LitforgeError):
    """The store stayed unreachable: these checkpoints exist only on local disk (exit 1)."""


@dataclass(eq=False)  # identity, not value: the same file may be submitted twice
class _Job:
    local: Path
    manifest: Manifest
    after_commit: Callable[[Manifest], None] | None = None


class Uploader:
    """Uploads in submission order on one worker thread; synchronous mode waits for each
    upload (up to `wait_s`), background mode does not.

    retries: attempts (with doubling backoff from `backoff_s`) of a new upload before it
    is left staged; a staged job then gets one attempt before each later upload, and more,
    with backoff, in `flush` until its deadline.
    """

    def __init__(
        self,
        store: CheckpointStore,
        background: bool = False,
        retries: int = 3,
        backoff_s: float = 1.0,
        wait_s: float | None = None,
    ) -> None:
        self.store = store
        self.background = background
        self.retries = retries
        self.backoff_s = backoff_s
        # Synchronous mode waits this long for an upload; one that takes longer (a store
        # that hangs) goes on in the background and training goes on with it.
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._failed: list[_Job] = []  # tried and not uploaded yet, oldest first
        self._submitted: list[tuple[_Job, Future[None]]] = []  # jobs not reaped yet
        self._closing = threading.Event()  # close(): end backoff sleeps and retries
        # Both modes upload on the one worker, so a store that hangs never holds the caller
        # longer than wait_s; background mode just does not wait at all.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="litforge-upload")

    def submit(
        self, local: Path, manifest: Manifest, after_commit=None, block: bool = True
    ) -> None:
        """Upload `local` as `manifest.name`; `after_commit` runs once its marker exists.

        In synchronous mode (and `block`), returns once the upload is done or `wait_s` passed.
        """
        job = _Job(local, manifest, after_commit)
        if self._closing.is_set():
            raise RuntimeError(f"the uploader to {self.store} is closed")
        with self._lock:
            # Forget finished jobs; one whose after_commit raised stays for flush to report.
            self._submitted = [
                (j, f)
                for j, f in self._submitted
                if not f.done() or (not f.cancelled() and f.exception() is not None)
            ]
            behind = [j.manifest.name for j, f in self._submitted if not f.done()]
            future = self._executor.submit(self._work, job)
            self._submitted.append((job, future))
        if self.background or not block:
            return
        if behind:  # the store has not finished an earlier upload: waiting again helps nobody
            log.warning(
                "checkpoint %s queued behind %s, still uploading to %s; training goes on",
                manifest.name, ", ".join(behind), self.store,
            )  # fmt: skip
            return
        done, _ = wait([future], timeout=self.wait_s)
        if not done:
            log.warning(
                "checkpoint %s: no answer from %s within %.0f s; training goes on, the upload "
                "continues in the background and the file stays at %s until it is done",
                manifest.name, self.store, self.wait_s, local,
            )  # fmt: skip

    def pending(self) -> list[Path]:
        """Local copies of the uploads that failed and are not uploaded yet, oldest first."""
        with self._lock:
            return [job.local for job in self._failed]

    def flush(self, timeout_s: float) -> None:
        """Wait for queued uploads and retry failed ones until `timeout_s`; raise if any remain."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            submitted = list(self._submitted)
        _, busy = wait([f for _, f in submitted], timeout=timeout_s)
        if busy:
            self._raise_busy(timeout_s)
        with self._lock:
            self._submitted = [(j, f) for j, f in self._submitted if not f.done()]
        for _, future in submitted:
            if not future.cancelled():
                future.result()  # an after_commit that raised on the worker raises here
        delay = self.backoff_s
        while self.pending() and time.monotonic() < deadline:
            # On the worker, so store calls never overlap.
            try:
                self._executor.submit(self._retry_failed).result(
                    timeout=max(0.0, deadline - time.monotonic())
                )
            except FutureTimeout:
                self._raise_busy(timeout_s)
            if self.pending():
                self._closing.wait(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 30.0)
        left = self.pending()
        if left:
            raise UploadsPending(
                f"the checkpoint store {self.store} is still unreachable; not uploaded, kept "
                f"locally: {', '.join(str(p) for p in left)}"
            )

    def close(self) -> None:
        """Stop the worker: queued uploads are dropped (their files stay staged), retries end.

        An upload already in flight gets up to a few seconds; it is not interrupted, and
        Python waits for it at exit (bounded by the filesystem's own timeouts).
        """
        self._closing.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            running = [f for _, f in self._submitted if not f.done()]
        wait(running, timeout=_CLOSE_WAIT_S)

    # -- the work, on the worker in background mode ---------------------------------------
    def _work(self, job: _Job) -> None:
        self._retry_failed()
        self._first_try(job)

    def _raise_busy(self, timeout_s: float) -> NoReturn:
        # The worker is still busy: report what it has not finished rather than letting
        # the process exit under a half-done upload.
        with self._lock:
            jobs = self._failed + [j for j, f in self._submitted if not f.done()]
        left = list(dict.fromkeys(jobs))  # a job may be failed and not yet marked done
        raise UploadsPending(
            f"uploads to {self.store} did not finish within {timeout_s:.0f} s; kept "
            f"locally: {', '.join(str(job.local) for job in left)}"
        )

    def _first_try(self, job: _Job) -> None:
        error = self._upload(job, attempts=self.retries)
        if error is None:
            return
        with self._lock:
            self._failed.append(job)
        log.warning(
            "checkpoint %s not uploaded to %s yet (%s); kept at %s, will retry",
            job.manifest.name, self.store, error, job.local,
        )  # fmt: skip

    def _retry_failed(self) -> None:
        # A job stays listed in _failed until it succeeds, so flush() can always name it.
        with self._lock:
            jobs = list(self._failed)
        for job in jobs:
            if self._closing.is_set():
                return
            self._upload(job, attempts=1)

    def _upload(self, job: _Job, attempts: int) -> str | None:
        """Up to `attempts` tries with backoff; None on success, else the last error."""
        delay = self.backoff_s
        error = ""
        for attempt in range(max(1, attempts)):
            if attempt and self._closing.wait(delay):
                break  # closed while backing off: the job stays staged
            delay *= 2
            try:
                self.store.upload(job.local, job.manifest)
            except Exception as err:  # noqa: BLE001 - any backend error means "not uploaded"
                error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                continue
            if not self.store.is_local:
                remove(job.local)
            with self._lock:
                if job in self._failed:
                    self._failed.remove(job)
            if job.after_commit is not None:
                job.after_commit(job.manifest)
            return None
        return error
