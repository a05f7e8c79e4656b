"""What the recipe holds of checkpointing for one run: `Checkpointing` (its callbacks, the
checkpoint fit starts from, `finish()` after fit), and `StoreCheckpointing` when checkpoints
go to a store."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import lightning as L

from litforge.checkpointing.callback import StoreCheckpoint
from litforge.checkpointing.lock import RunLock
from litforge.checkpointing.optimizer_settings import OptimizerSettings
from litforge.checkpointing.preemption import Preempted, Preemption
from litforge.checkpointing.restore import HotStart, Restore, load_weights
from litforge.checkpointing.resume import AlreadyFinished
from litforge.checkpointing.rng import RngState
from litforge.checkpointing.run_costs import RunCosts
from litforge.checkpointing.shape import ResumeShape
from litforge.checkpointing.store import CheckpointStore
from litforge.checkpointing.uploader import UploadsPending


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
