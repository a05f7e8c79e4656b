"""`compile.enabled=true` with checkpoints on a store: torch.compile's on-disk caches travel
beside the checkpoints, so a fresh machine (a recovered spot job) does not compile again.

Inductor keeps FX graphs, AOTAutograd entries, the generated C++/Triton kernels and
autotuning results under one directory (TORCHINDUCTOR_CACHE_DIR, default
/tmp/torchinductor_$USER; Triton's own cache lies inside it unless TRITON_CACHE_DIR says
otherwise). Its entries are keyed by their content, so a file from another machine is a hit
where it applies and a miss elsewhere. After a checkpoint save, the files this run added
there go, whenever they changed, to `<checkpoint dir>/compile-cache/torch-<version>-<device>.tar`
(one archive per torch and card: a recovered job on another card neither loads nor
overwrites the first card's); a run unpacks its archive before the sanity check and the
first step. The archive is code this machine will run (inductor imports its `.py` files):
it is signed with a key the bucket does not hold and used only when the signature verifies
(archive.py). torch's portable artifacts
(`torch.compiler.save_cache_artifacts`) were measured here first: loaded into an empty
cache they saved no clear time on CPU, where a whole directory cut the first compiled step
from 10-21 s to 2.7 s.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import lightning as L

from litforge import console, run_record
from litforge.compile_cache.archive import (
    DEFAULT_MAX_BYTES,
    NO_KEY,
    SIGNATURE_SUFFIX,
    ArchiveRefused,
    Store,
    fetch_verified,
    load_key,
    signature,
    unpack,
)
from litforge.compile_cache.local_files import (
    FOLDER,
    Files,
    archive_name,
    local_roots,
    lookups,
    pack,
    scan,
)
from litforge.compiling_settings import CompileSettings


@runtime_checkable
class SavesToAStore(Protocol):
    """The run's checkpoint saver as the cache sees it: the store its checkpoints go to and
    its local staging directory (litforge.checkpointing's `StoreCheckpoint`)."""

    store: Store
    staging_dir: Path


def when_enabled(
    settings: dict[str, Any] | None, checkpoint_dir: str | None, run_dir: str
) -> CompileCache | None:
    """conf/callbacks/compile_cache.yaml's target: the callback when the run compiles with
    inductor (the backend with on-disk caches), `compile.cache` is on, as it is by default,
    and checkpoints go somewhere (`checkpoint_dir`; None under checkpoint=none); no callback
    otherwise. Its key is read here, before training: a key file that cannot be read is one
    ConfigError."""
    asked = CompileSettings.of({"compile": settings or {}})
    if not (asked.enabled and asked.cache and checkpoint_dir) or asked.backend != "inductor":
        return None
    key = load_key(asked.cache_key_file)
    return CompileCache(run_dir=Path(run_dir), key=key, max_bytes=int(asked.cache_max_bytes))


class CompileCache(L.Callback):
    """Fetch this card's compile cache at fit start (each node's first process, the others
    wait); rank 0 uploads the files the run added after a checkpoint save, when they
    changed, in the background. `store` and `staging_dir` default to those of the run's
    checkpoint saver, found among the Trainer's callbacks at fit start (none: the callback
    does nothing). `key` signs and verifies the archive; without one nothing is fetched or
    uploaded. `max_bytes` bounds the archive fetched and what it unpacks to."""

    def __init__(
        self,
        store: Store | None = None,
        staging_dir: Path | None = None,
        run_dir: Path | None = None,
        key: bytes | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._store = store
        self._key = key  # never logged, never in a checkpoint (the callback has no state)
        self.max_bytes = max_bytes
        self._staging_dir = None if staging_dir is None else Path(staging_dir)
        self.run_dir = run_dir
        self._roots: dict[str, Path] = {}
        self._before: Files = {}  # what the local caches held before this run
        self._uploaded: Files = {}
        self._upload: threading.Thread | None = None
        self._name = ""
        self._record: dict[str, Any] = {}  # for run.json: what was fetched, and how fast

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # At fit start, after Lightning's restore and before the sanity check and the first
        # step: run.json's restart phases count the fetch in `restore`, as they always did.
        if not self._beside_checkpoints(trainer):
            return
        if trainer.local_rank == 0 and self._key is None:
            console.info(NO_KEY)
            if trainer.is_global_zero and self.run_dir is not None:
                run_record.update(self.run_dir, compile_cache={"off": "no key"})
        elif trainer.local_rank == 0:  # each node's first process; its others share its caches
            self._roots = local_roots()
            self._name = archive_name(trainer.strategy.root_device)
            self._before = scan(self._roots)
            self._record = self._fetch()
            if trainer.is_global_zero and self.run_dir is not None:
                run_record.update(self.run_dir, compile_cache=self._record)
        trainer.strategy.barrier("litforge-compile-cache")
        if self._roots:
            self._uploaded = self._ours()  # a resumed run that compiles nothing new uploads nothing

    def _beside_checkpoints(self, trainer: L.Trainer) -> bool:
        """Take the store and staging directory of the run's checkpoint saver unless given;
        False when there is none (checkpoints off: nowhere to keep the cache)."""
        if self._store is None:
            saver = next((c for c in trainer.callbacks if isinstance(c, SavesToAStore)), None)  # type: ignore[attr-defined]
            self._store = None if saver is None else saver.store
            self._staging_dir = None if saver is None else Path(saver.staging_dir)
        return self._store is not None and self._staging_dir is not None

    def _fetch(self) -> dict[str, Any]:
        started = time.perf_counter()
        record: dict[str, Any] = {"archive": f"{self._store}/{self._name}", "fetched_files": 0}
        local = self._staging_dir / f"{FOLDER}-{os.getpid()}.tar"
        local.parent.mkdir(parents=True, exist_ok=True)
        assert self._key is not None
        try:
            fetch_verified(self._store, self._name, self._key, local, self.max_bytes)
        except FileNotFoundError:
            local.unlink(missing_ok=True)
            console.info("compile cache: none at %s yet (this run compiles and saves one)",
                         record["archive"])  # fmt: skip
            return record
        except ArchiveRefused as err:
            local.unlink(missing_ok=True)
            console.warn("compile cache: %s; compiling from scratch", err)
            return record
        except Exception as err:  # noqa: BLE001 - an optimisation: a failure only costs time
            local.unlink(missing_ok=True)
            console.warn("compile cache: could not fetch %s (%s: %s); compiling from scratch",
                         record["archive"], type(err).__name__, err)  # fmt: skip
            return record
        try:
            record["fetched_files"] = unpack(local, self._roots, self.max_bytes, record["archive"])
        except ArchiveRefused as err:
            console.warn("compile cache: %s; compiling from scratch", err)
            return record
        except OSError as err:
            console.warn("compile cache: could not unpack %s (%s); compiling from scratch",
                         record["archive"], err)  # fmt: skip
            return record
        finally:
            local.unlink(missing_ok=True)
        record["fetch_s"] = round(time.perf_counter() - started, 3)
        console.info("compile cache: %d files from %s in %.1f s", record["fetched_files"],
                     record["archive"], record["fetch_s"])  # fmt: skip
        return record

    def _ours(self) -> Files:
        now = scan(self._roots)
        return {k: v for k, v in now.items() if self._before.get(k) != v}

    def on_save_checkpoint(self, trainer: L.Trainer, *args: Any) -> None:
        # Between steps no compile is in flight, so the files scanned here are whole.
        if not trainer.is_global_zero or not self._roots:
            return
        if self._upload is not None and self._upload.is_alive():
            return  # the next save carries what this one would have
        ours = self._ours()
        if not ours or ours == self._uploaded:
            return
        archive = self._staging_dir / f"{FOLDER}-upload.tar"
        size = pack(ours, self._roots, archive)
        assert self._key is not None  # no key: no roots, nothing to upload
        signed = signature(self._key, self._name, archive)
        self._uploaded = ours
        self._upload = threading.Thread(
            target=self._send, args=(archive, signed, size, trainer.global_step),
            name="litforge-compile-cache", daemon=True,
        )  # fmt: skip
        self._upload.start()

    def _send(self, archive: Path, signed: str, size: int, step: int) -> None:
        target = self._store.path(self._name)
        # The archive, then its signature: a fetch in between finds them apart, which costs
        # one compile, never an unverified file.
        try:
            if self._store.is_local:  # whole or absent: a rename after the copy
                self._store.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                self._store.fs.put_file(str(archive), target + ".partial")
                self._store.fs.mv(target + ".partial", target)
                self._store.fs.pipe_file(target + SIGNATURE_SUFFIX + ".partial", signed.encode())
                self._store.fs.mv(target + SIGNATURE_SUFFIX + ".partial", target + SIGNATURE_SUFFIX)
            else:  # an object store's upload is whole or absent already
                self._store.fs.put_file(str(archive), target)
                self._store.fs.pipe_file(target + SIGNATURE_SUFFIX, signed.encode())
            console.info("compile cache: %.1f MB saved to %s/%s at step %d", size / 2**20,
                         self._store, self._name, step)  # fmt: skip
        except Exception as err:  # noqa: BLE001 - an optimisation: a failure only costs time
            self._uploaded = {}  # the next save tries again
            console.warn("compile cache: upload to %s/%s failed (%s: %s); the next "
                         "checkpoint tries again", self._store, self._name,
                         type(err).__name__, err)  # fmt: skip

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero and self.run_dir is not None and self._roots:
            run_record.update(self.run_dir, compile_cache={**self._record, **lookups()})

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # A bounded wait (a spot notice leaves seconds): the upload thread is a daemon, and
        # an archive cut short is never read (the store's put is whole or absent).
        if self._upload is not None:
            self._upload.join(self._store.timeout_s or 30.0)
