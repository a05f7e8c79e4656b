"""Checkpoint config -> store, start-up checks, resume point and callbacks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightning as L
from omegaconf import DictConfig, OmegaConf

from litforge import console
from litforge.checkpointing import resume
from litforge.checkpointing.callback import StoreCheckpoint
from litforge.checkpointing.preemption import Preemption
from litforge.checkpointing.rng import RngState
from litforge.checkpointing.store import CheckpointStore


def run_checkpoint_url(cfg: DictConfig) -> str:
    """checkpoint.dir itself if it lies in the run directory, else checkpoint.dir/<run key>."""
    base = str(cfg.checkpoint.dir).rstrip("/")
    run_dir = Path(cfg.run_dir).resolve()
    if "://" not in base or base.startswith("file://"):
        local = Path(base.removeprefix("file://")).resolve()
        if local == run_dir or run_dir in local.parents:
            return str(local)
    return f"{base}/{cfg.get('run_name') or run_dir.name}"


@dataclass
class Checkpointing:
    store: CheckpointStore
    saver: StoreCheckpoint
    preemption: Preemption
    ckpt_path: Path | None  # what trainer.fit resumes from

    @property
    def callbacks(self) -> list[L.Callback]:
        return [self.saver, RngState(), self.preemption]


def setup(cfg: DictConfig) -> Checkpointing | None:
    """Open and probe the store, pick the resume point; all before any training."""
    opts = cfg.get("checkpoint")
    staging = Path(opts.staging_dir) if opts else Path(cfg.run_dir) / "checkpoint-staging"
    explicit = cfg.get("ckpt_path")
    if not opts:
        if explicit:
            console.info(
                "resuming from ckpt_path=%s (checkpoint=none: nothing new is saved)", explicit
            )
        return None
    raw_options = opts.get("storage_options")
    options = OmegaConf.to_container(raw_options, resolve=True) if raw_options else {}
    store = CheckpointStore(run_checkpoint_url(cfg), options)
    store.check_access()
    resumed_name = None
    if explicit:
        ckpt_path = resume.fetch_explicit(explicit, staging)
        console.info("resuming from ckpt_path=%s", explicit)
    elif cfg.get("resume", "auto") == "never":
        ckpt_path = None
        console.info("resume=never: starting fresh; checkpoints go to %s", store)
    else:
        found = resume.newest_complete(store, staging)
        ckpt_path, resumed_name = found if found else (None, None)
        if found:
            console.info("resuming from %s/%s", store, resumed_name)
        else:
            console.info("no checkpoint in %s: starting fresh", store)
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
    )
    return Checkpointing(store, saver, Preemption(saver), ckpt_path)
