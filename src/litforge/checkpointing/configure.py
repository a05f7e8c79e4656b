"""conf/checkpoint -> one `Checkpointing` object: the recipe's only view of checkpointing.

`setup` reads in the order it happens: the store opened, locked and its staged uploads
finished; the store probed (only where its checkpoints can decide); where the run starts
decided (`start.decide`, a pure function); that start carried out (its checkpoint fetched
and checked once, the store's set aside, one line said); the saver built.
"""

from __future__ import annotations

import shutil
from contextlib import nullcontext
from pathlib import Path

import fsspec
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig

from litforge import console
from litforge.checkpointing import checkpoint_file, resume
from litforge.checkpointing.callback import StoreCheckpoint
from litforge.checkpointing.lock import LOCK_NAME, RunLock, acquire_all
from litforge.checkpointing.restore import Restore, named, requested
from litforge.checkpointing.restore import fetch as fetch_restore
from litforge.checkpointing.session import Best, Checkpointing, StoreCheckpointing, resuming
from litforge.checkpointing.settings import CheckpointSettings
from litforge.checkpointing.start import Asked, Start, decide
from litforge.checkpointing.store import CheckpointStore, download_dir
from litforge.errors import ConfigError
from litforge.launch import multirun
from litforge.launch.fsdp import is_fsdp_run
from litforge.run_settings import ResumeSettings, RunSettings

__all__ = ["Best", "Checkpointing", "StoreCheckpointing", "resume_hint", "run_checkpoint_url",
           "run_key", "setup"]  # fmt: skip


def run_checkpoint_url(cfg: DictConfig) -> str:
    """checkpoint.dir itself if it lies in the run directory, else checkpoint.dir/<run_key>."""
    raw = str(CheckpointSettings.of(cfg).dir)
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
    return RunSettings.of(cfg).run_name or Path(cfg.run_dir).resolve().name


def setup(cfg: DictConfig) -> Checkpointing:
    """Open and probe the store and pick the resume point, all before any training."""
    # checkpoint=none: no node, no settings
    opts = CheckpointSettings.of(cfg) if cfg.get("checkpoint") else None
    staging = Path(opts.staging_dir) if opts else Path(cfg.run_dir) / "checkpoint-staging"
    wanted = requested(cfg)  # a bad restore.* is one line before anything is opened
    if not opts:  # checkpoint=none: the same decision, with no store to list
        asked = _asked(cfg, None, wanted)
        resume_from, restored = _begin(cfg, decide(asked), asked, staging)
        return _without_store(cfg, resume_from, restored)
    store = _open_store(cfg, opts)
    locks = _lock(store, Path(cfg.run_dir))  # before anything in the store changes
    _upload_staged(store, staging)  # so the newest checkpoint anywhere is listed
    asked = _asked(cfg, store, wanted)
    found = resume.newest_intact(store, staging) if asked.reads_store else None
    newest, name = found or (None, None)
    start = decide(asked, name)
    resume_from, restored = _begin(cfg, start, asked, staging, store, newest)
    saver = _saver(cfg, opts, store, staging, start.own_name)
    shape = ResumeSettings.of(cfg).resume_shape
    checkpointing = StoreCheckpointing(store, saver, resume_from, locks, Path(cfg.run_dir), shape)
    checkpointing.restore = restored
    return checkpointing


def _asked(
    cfg: DictConfig, store: CheckpointStore | None, wanted: tuple[str, str, bool] | None
) -> Asked:
    location = None if store is None else str(store)
    how = ResumeSettings.of(cfg)
    return Asked(location, how.ckpt_path or None, how.resume, wanted)


def _begin(
    cfg: DictConfig,
    start: Start,
    asked: Asked,
    staging: Path,
    store: CheckpointStore | None = None,
    newest: Path | None = None,
) -> tuple[Path | None, Restore | None]:
    """Carry `start` out: fetch its checkpoint, check the one fit resumes (here, once,
    whatever its source), set the store's checkpoints aside, say where the run starts.
    Returns what fit resumes from and the restore whose weights the module gets."""
    local, restored = _fetch(cfg, start, asked, staging, store, newest)
    if local is not None:
        # Errors name restore.from, not ckpt_path (checkpoint_file's name for the file).
        with named() if start.kind == "restore-continue" else nullcontext():
            checkpoint_file.check_resumable(local, cfg.model, str(start.what), is_fsdp_run(cfg))
    if start.set_aside:  # only once the start checked out: nothing moves for a refused run
        _set_aside(store)
    if start.message:
        console.info(start.message)
    return local, restored


def _fetch(
    cfg: DictConfig,
    start: Start,
    asked: Asked,
    staging: Path,
    store: CheckpointStore | None,
    newest: Path | None,
) -> tuple[Path | None, Restore | None]:
    """The checkpoint fit resumes from, local, or restore.from's weights (`Restore`). A
    resumed checkpoint from outside this run's lineage (ckpt_path, restore.from) is copied
    where setting the store aside cannot move it."""
    if start.kind == "explicit":
        return _outside(store, checkpoint_file.fetch(str(start.source), staging), staging), None
    if start.kind == "own":
        return newest, None  # fetched (and its bytes checked) by the probe
    if start.kind == "fresh" or asked.restore is None:
        return None, None
    restored = fetch_restore(cfg, *asked.restore, staging)
    if start.kind == "restore-weights":
        return None, restored
    return _outside(store, restored.local, staging), None


def _without_store(
    cfg: DictConfig, resume_from: Path | None, restored: Restore | None
) -> Checkpointing:
    """checkpoint=none's Checkpointing: a resumed run still gets the resume checks."""
    started = Checkpointing(resume_from)
    started.restore = restored
    if resume_from is not None:
        started.callbacks += resuming(ResumeSettings.of(cfg).resume_shape, Path(cfg.run_dir))
    return started


def _open_store(cfg: DictConfig, opts: CheckpointSettings) -> CheckpointStore:
    """This run's checkpoint location, its access checked (one line if it is refused)."""
    store = CheckpointStore(run_checkpoint_url(cfg), opts.storage_options or {}, opts.timeout_s)
    store.check_access()
    return store


def _upload_staged(store: CheckpointStore, staging: Path) -> None:
    """Rank 0 uploads what a previous attempt left staged (a store outage)."""
    if rank_zero_only.rank != 0:
        return
    uploaded = resume.upload_staged(store, staging)
    if uploaded:
        console.info("uploaded %d staged checkpoints to %s: %s", len(uploaded), store,
                     ", ".join(uploaded))  # fmt: skip


def _saver(
    cfg: DictConfig,
    opts: CheckpointSettings,
    store: CheckpointStore,
    staging: Path,
    resumed_from: str | None,
) -> StoreCheckpoint:
    """The callback that saves this run's checkpoints to `store` (conf/checkpoint)."""
    return StoreCheckpoint(
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
        resumed_from=resumed_from,
        resume_hint=resume_hint(cfg),
    )


def resume_hint(cfg: DictConfig) -> str:
    """How to continue this run, for the messages of a run that stops early: a named run
    (or a sweep job) resumes with the same command; an unnamed one would start fresh in a
    new directory, so it needs its run directory given."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    sweep = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    if RunSettings.of(cfg).run_name or sweep:
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


def _set_aside(store: CheckpointStore | None) -> None:
    """A new lineage: the checkpoints already at the store move aside (rank 0 moves them;
    ranks started later find the location empty)."""
    if store is None or rank_zero_only.rank != 0:
        return
    folder = store.set_aside()
    if folder:
        console.info("set aside the checkpoints already in %s: now in %s", store, folder)


def _outside(store: CheckpointStore | None, local: Path, staging: Path) -> Path:
    """A local copy of `local` that setting the store aside will not move."""
    if store is None or not store.is_local:
        return local
    if Path(store.root).resolve() not in local.resolve().parents:
        return local
    copy = download_dir(staging, "explicit") / local.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    if local.is_dir():  # a sharded checkpoint
        shutil.copytree(local, copy, dirs_exist_ok=True)
    else:
        shutil.copyfile(local, copy)
    return copy
