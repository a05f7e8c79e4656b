"""conf/checkpoint -> one `Checkpointing` object: the recipe's only view of checkpointing."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import fsspec
import lightning as L
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from litforge import console
from litforge.checkpointing import checkpoint_file, compile_cache, resume
from litforge.checkpointing.callback import StoreCheckpoint
from litforge.checkpointing.lock import LOCK_NAME, RunLock, acquire_all
from litforge.checkpointing.optimizer_settings import OptimizerSettings
from litforge.checkpointing.preemption import Preempted, Preemption
from litforge.checkpointing.restore import HotStart, Restore, load_weights, named, requested
from litforge.checkpointing.restore import fetch as fetch_restore
from litforge.checkpointing.resume import AlreadyFinished
from litforge.checkpointing.rng import RngState
from litforge.checkpointing.run_costs import RunCosts
from litforge.checkpointing.shape import ResumeShape
from litforge.checkpointing.store import CheckpointStore, download_dir
from litforge.checkpointing.uploader import UploadsPending
from litforge.errors import ConfigError
from litforge.launch import multirun
from litforge.launch.fsdp import is_fsdp_run


@dataclass(frozen=True)
class Best:
    """The checkpoint to test after fit: a local file for Lightning, its URL for the record."""

    local: Path | None = None
    url: str | None = None


class Checkpointing:
    """`checkpoint=none`: nothing is saved; an explicit `ckpt_path` is still resumed from."""

    def __init__(self, resume_from: Path | None = None) -> None:
        self.resume_from = resume_from  # what trainer.fit(ckpt_path=...) starts from
        self.restore: Restore | None = None  # restore.mode=finetune|hotstart, if it applies
        self.callbacks: list[L.Callback] = []
        self.location: str | None = None  # where this run's checkpoints go (credentials cut)

    def attach(self, module: L.LightningModule) -> list[L.Callback]:
        """This run's checkpointing callbacks for the Trainer. A run that starts from another
        run's checkpoint (restore.mode=finetune | hotstart) gets its weights into `module`
        first, and a hot start the callback that loads its optimizer state at fit start."""
        if self.restore is None:
            return list(self.callbacks)
        load_weights(module, self.restore)
        hot = [HotStart(self.restore)] if self.restore.mode == "hotstart" else []
        return [*self.callbacks, *hot]

    def finish(self, trainer: L.Trainer) -> Best:
        """After fit: the best checkpoint to test (none here: the weights in memory)."""
        return Best()

    def release(self, wait_s: float | None = None) -> None:
        """Give up this run's locks (once; also when fit raised), waiting at most `wait_s`."""


class StoreCheckpointing(Checkpointing):
    """Checkpoints on an fsspec store: saves, RNG state, preemption, uploads."""

    def __init__(
        self,
        store: CheckpointStore,
        saver: StoreCheckpoint,
        resume_from: Path | None,
        locks: list[RunLock] | None = None,
        run_dir: Path | None = None,
        resume_shape: str = "adapt",
    ) -> None:
        super().__init__(resume_from)
        self.store = store
        self.location = str(store)
        self.saver = saver
        self.locks = locks or []
        self.preemption = Preemption(saver)
        self.callbacks = [saver, RngState(), self.preemption, *resuming(resume_shape, run_dir)]
        if run_dir is not None:
            self.callbacks.append(RunCosts(run_dir, saver))

    def finish(self, trainer: L.Trainer) -> Best:
        """Wait for every upload, then raise `Preempted` if a signal stopped training.

        Raises `UploadsPending` (naming the local copies) if the store stayed unreachable.
        """
        deadline = None
        try:
            signum = self.preemption.stopped_by
            if not signum:
                self.saver.finish()
                best = self.saver.agreed_best(trainer)
                return Best(self.saver.best_local_path(best), self.saver.best_url(best))
            staged = None
            # Within the grace period: one request's worth of waiting (checkpoint.timeout_s)
            # for the uploads and the lock release together, not the final flush.
            deadline = time.monotonic() + (self.store.timeout_s or 0.0)
            try:
                self.saver.finish(timeout_s=self.store.timeout_s)
            except UploadsPending:
                staged = str(self.saver.staging_dir)
            raise Preempted(
                signum, trainer.global_step, str(self.store), staged, self.saver.resume_hint
            )
        finally:
            self.release(None if deadline is None else max(0.5, deadline - time.monotonic()))

    def release(self, wait_s: float | None = None) -> None:
        for lock in self.locks:
            lock.release(wait_s)


def resuming(resume_shape: str, run_dir: Path | None) -> list[L.Callback]:
    """What a resumed run checks against its checkpoint: its shape, its optimizer and
    schedule settings, whether it had already finished."""
    found = [ResumeShape(resume_shape), OptimizerSettings()]
    return found + ([AlreadyFinished(run_dir)] if run_dir is not None else [])


def run_checkpoint_url(cfg: DictConfig) -> str:
    """checkpoint.dir itself if it lies in the run directory, else checkpoint.dir/<run_key>."""
    raw = str(cfg.checkpoint.dir)
    scheme, sep, rest = raw.partition("://")
    if sep and not rest.strip("/"):
        raise ConfigError(
            f"checkpoint.dir={raw} names no bucket or location after {scheme}://; "
            f"use e.g. {scheme}://BUCKET/prefix, or a local path"
        )
    base = raw.rstrip("/")
    run_dir = Path(cfg.run_dir).resolve()
    if not sep or base.startswith("file://"):
        local = Path(base.removeprefix("file://")).resolve()
        if local == run_dir or run_dir in local.parents:
            return str(local)
    return f"{base}/{run_key(cfg)}"


def run_key(cfg: DictConfig) -> str:
    """This run's key in a shared checkpoint location: run_name, or the run directory's name;
    a job of a sweep (`-m`) gets its own (multirun.job_name), so jobs never resume from one
    another, and a retried trial of a sweeper that keeps its directory finds its checkpoints.
    """
    if multirun.in_multirun():
        return multirun.job_name(cfg)
    return cfg.get("run_name") or Path(cfg.run_dir).resolve().name


def setup(cfg: DictConfig) -> Checkpointing:
    """Open and probe the store and pick the resume point, all before any training."""
    opts = cfg.get("checkpoint")
    staging = Path(opts.staging_dir) if opts else Path(cfg.run_dir) / "checkpoint-staging"
    explicit = cfg.get("ckpt_path")
    sharded = is_fsdp_run(cfg)  # its checkpoints are directories
    wanted = requested(cfg)  # restore.mode: applies while the run has no checkpoint of its own
    if not opts:
        if wanted and wanted[0] != "continue":
            started = Checkpointing()
            started.restore = fetch_restore(cfg, *wanted, staging)
            return started
        if not (wanted or explicit):
            return Checkpointing()
        if wanted:  # restore.mode=continue: a resume from restore.from
            key, source = "restore.from", wanted[1]
            local = fetch_restore(cfg, *wanted, staging).local
            with named():
                checkpoint_file.check_resumable(local, cfg.model, f"{key}={source}", sharded)
        else:
            key, source = "ckpt_path", explicit
            local = checkpoint_file.fetch(explicit, staging)
            checkpoint_file.check_resumable(local, cfg.model, f"{key}={source}", sharded)
        console.info("resuming from %s=%s (checkpoint=none: nothing new is saved)", key, source)
        resumed = Checkpointing(local)
        resumed.callbacks += resuming(str(cfg.get("resume_shape", "adapt")), Path(cfg.run_dir))
        return resumed
    raw_options = opts.get("storage_options")
    options = OmegaConf.to_container(raw_options, resolve=True) if raw_options else {}
    store = CheckpointStore(run_checkpoint_url(cfg), options, opts.get("timeout_s"))
    store.check_access()
    locks = _lock(store, Path(cfg.run_dir))  # before anything in the store changes
    if rank_zero_only.rank == 0:
        uploaded = resume.upload_staged(store, staging)
        if uploaded:
            console.info("uploaded %d staged checkpoints to %s: %s", len(uploaded), store,
                         ", ".join(uploaded))  # fmt: skip
    resumed_name = None
    restored: Restore | None = None
    if explicit:
        ckpt_path = _outside(store, checkpoint_file.fetch(explicit, staging), staging)
        checkpoint_file.check_resumable(ckpt_path, cfg.model, f"ckpt_path={explicit}", sharded)
        _set_aside(store)
        console.info("resuming from ckpt_path=%s", explicit)
    elif cfg.get("resume", "auto") == "never":
        ckpt_path = None
        _set_aside(store)
        console.info("resume=never: starting fresh; checkpoints go to %s", store)
    else:
        found = resume.newest_complete(store, staging, cfg.model, sharded)
        ckpt_path, resumed_name = found if found else (None, None)
        if found:
            console.info("resuming from %s/%s", store, resumed_name)
        elif not wanted:
            console.info("no checkpoint in %s: starting fresh", store)
    if wanted and ckpt_path is None:  # nothing of its own to resume: start from restore.from
        restored = fetch_restore(cfg, *wanted, staging)
        if restored.mode == "continue":
            ckpt_path = _outside(store, restored.local, staging)
            with named():
                checkpoint_file.check_resumable(ckpt_path, cfg.model, f"restore.from={wanted[1]}",
                                                sharded)  # fmt: skip
            restored = None
    saver = StoreCheckpoint(
        store,
        staging,
        every_n_train_steps=opts.every_n_train_steps,
        train_time_interval=opts.train_time_interval,
        save_on_validation=opts.save_on_validation,
        keep_last=opts.keep_last,
        monitor=opts.monitor,
        mode=opts.mode,
        async_upload=opts.async_upload,
        upload_retries=opts.upload_retries,
        final_upload_timeout_s=opts.final_upload_timeout_s,
        resumed_from=resumed_name,
        resume_hint=resume_hint(cfg),
    )
    shape = str(cfg.get("resume_shape", "adapt"))
    checkpointing = StoreCheckpointing(store, saver, ckpt_path, locks, Path(cfg.run_dir), shape)
    checkpointing.restore = restored
    checkpointing.callbacks += compile_cache.attach(cfg, store, staging)
    return checkpointing


def resume_hint(cfg: DictConfig) -> str:
    """How to continue this run, for the messages of a run that stops early: a named run
    (or a sweep job) resumes with the same command; an unnamed one would start fresh in a
    new directory, so it needs its run directory given."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    sweep = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    if cfg.get("run_name") or sweep:
        return "the same command resumes"
    return f"the same command plus hydra.run.dir={cfg.run_dir} resumes"


def _lock(store: CheckpointStore, run_dir: Path) -> list[RunLock]:
    """Rank 0 locks the store location and the run directory (released by finish(), or at
    exit); the other ranks of the same run are its own processes."""
    if rank_zero_only.rank != 0:
        return []
    run_dir.mkdir(parents=True, exist_ok=True)
    local = fsspec.filesystem("file")
    locks = [
        RunLock(store.fs, store.path(LOCK_NAME), str(store), timeout_s=store.timeout_s),
        RunLock(local, str(run_dir / LOCK_NAME), str(run_dir)),
    ]
    return acquire_all(locks)


def _set_aside(store: CheckpointStore) -> None:
    """A new lineage: the checkpoints already at the store move aside (rank 0 moves them;
    ranks started later find the location empty)."""
    if rank_zero_only.rank != 0:
        return
    folder = store.set_aside()
    if folder:
        console.info("set aside the checkpoints already in %s: now in %s", store, folder)


def _outside(store: CheckpointStore, local: Path, staging: Path) -> Path:
    """A local copy of `local` that setting the store aside will not move."""
    if not store.is_local or Path(store.root).resolve() not in local.resolve().parents:
        return local
    copy = download_dir(staging, "explicit") / local.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    if local.is_dir():  # a sharded checkpoint
        shutil.copytree(local, copy, dirs_exist_ok=True)
    else:
        shutil.copyfile(local, copy)
    return copy
