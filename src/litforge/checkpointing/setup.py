"""conf/checkpoint -> one `Checkpointing` object: the recipe's only view of checkpointing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightning as L
from omegaconf import DictConfig, OmegaConf

from litforge import console
from litforge.checkpointing import checkpoint_file, resume
from litforge.checkpointing.callback import StoreCheckpoint
from litforge.checkpointing.preemption import Preempted, Preemption
from litforge.checkpointing.rng import RngState
from litforge.checkpointing.store import CheckpointStore


@dataclass(frozen=True)
class Best:
    """The checkpoint to test after fit: a local file for Lightning, its URL for the record."""

    local: Path | None = None
    url: str | None = None


class Checkpointing:
    """`checkpoint=none`: nothing is saved; an explicit `ckpt_path` is still resumed from."""

    def __init__(self, resume_from: Path | None = None) -> None:
        self.resume_from = resume_from  # what trainer.fit(ckpt_path=...) starts from
        self.callbacks: list[L.Callback] = []

    def finish(self, trainer: L.Trainer) -> Best:
        """After fit: the best checkpoint to test (none here: the weights in memory)."""
        return Best()


class StoreCheckpointing(Checkpointing):
    """Checkpoints on an fsspec store: saves, RNG state, preemption, uploads."""

    def __init__(
        self, store: CheckpointStore, saver: StoreCheckpoint, resume_from: Path | None
    ) -> None:
        super().__init__(resume_from)
        self.store = store
        self.saver = saver
        self.preemption = Preemption(saver)
        self.callbacks = [saver, RngState(), self.preemption]

    def finish(self, trainer: L.Trainer) -> Best:
        """Wait for every upload, then raise `Preempted` if a signal stopped training.

        Raises `UploadsPending` (naming the local copies) if the store stayed unreachable.
        """
        self.saver.finish()
        if self.preemption.stopped_by:
            raise Preempted(self.preemption.stopped_by, trainer.global_step, str(self.store))
        return Best(self.saver.best_local_path(), self.saver.best_url())


def run_checkpoint_url(cfg: DictConfig) -> str:
    """checkpoint.dir itself if it lies in the run directory, else checkpoint.dir/<run key>."""
    base = str(cfg.checkpoint.dir).rstrip("/")
    run_dir = Path(cfg.run_dir).resolve()
    if "://" not in base or base.startswith("file://"):
        local = Path(base.removeprefix("file://")).resolve()
        if local == run_dir or run_dir in local.parents:
            return str(local)
    return f"{base}/{cfg.get('run_name') or run_dir.name}"


def setup(cfg: DictConfig) -> Checkpointing:
    """Open and probe the store and pick the resume point, all before any training."""
    opts = cfg.get("checkpoint")
    staging = Path(opts.staging_dir) if opts else Path(cfg.run_dir) / "checkpoint-staging"
    explicit = cfg.get("ckpt_path")
    if not opts:
        if not explicit:
            return Checkpointing()
        console.info("resuming from ckpt_path=%s (checkpoint=none: nothing new is saved)", explicit)
        return Checkpointing(checkpoint_file.fetch(explicit, staging))
    raw_options = opts.get("storage_options")
    options = OmegaConf.to_container(raw_options, resolve=True) if raw_options else {}
    store = CheckpointStore(run_checkpoint_url(cfg), options)
    store.check_access()
    resumed_name = None
    if explicit:
        ckpt_path = checkpoint_file.fetch(explicit, staging)
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
    return StoreCheckpointing(store, saver, ckpt_path)
