"""When to save a checkpoint and which ones to keep.

Replaces Lightning's ModelCheckpoint for remote directories, where `ckpt_path="last"`
silently trains from scratch (pytorch-lightning #18261), `save_last="link"` raises, and
top-k cleanup can delete the file a run resumed from (#21813).
"""

from __future__ import annotations

import errno
import logging
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch

from litforge.checkpointing.store import (
    MARKER_SUFFIX,
    CheckpointStore,
    Manifest,
    checkpoint_name,
    digest,
)
from litforge.checkpointing.uploader import Uploader
from litforge.errors import ConfigError, LitforgeError

log = logging.getLogger("litforge")
# A full disk (or quota): a save that cannot be written, which the run survives.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class FinalSaveFailed(LitforgeError):
    """The checkpoint that ends a run (end of fit, a preemption) could not be written."""


@dataclass(frozen=True)
class SaveTiming:
    """How long training waited on one save (serialize, hash and, if synchronous, upload)."""

    step: int
    wall_s: float
    cpu_s: float
    bytes: int


def check_all_shards(path: Path, world_size: int, staging_dir: Path) -> None:
    """A sharded checkpoint (torch distributed checkpoint: `__<rank>_<i>.distcp` per rank)
    must hold every rank's shard before it is committed."""
    ranks = {int(f.name[2:].split("_")[0]) for f in path.glob("__*_*.distcp")}
    missing = sorted(set(range(world_size)) - ranks)
    if missing:
        raise LitforgeError(
            f"the sharded checkpoint {path} lacks the shards of ranks {missing}: they wrote "
            f"theirs on their own node. With several nodes, checkpoint.staging_dir (now "
            f"{staging_dir}) or a local checkpoint.dir must be on a filesystem every node shares"
        )


class StoreCheckpoint(L.Callback):
    """Save every `every_n_train_steps` optimizer steps, every `train_time_interval` minutes,
    after each validation and at the end; keep the newest `keep_last` plus the best by
    `monitor`. Never deletes the checkpoint the run resumed from or the newest complete one.
    """

    def __init__(
        self,
        store: CheckpointStore,
        staging_dir: Path,
        every_n_train_steps: int | None = None,
        train_time_interval: float | None = None,
        save_on_validation: bool = True,
        keep_last: int = 2,
        monitor: str | None = "val/loss",
        mode: str = "min",
        async_upload: bool = False,
        upload_retries: int = 3,
        final_upload_timeout_s: float = 120.0,
        resumed_from: str | None = None,
        resume_hint: str = "the same command resumes",
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"checkpoint.mode={mode} must be min or max")
        self.store = store
        self.staging_dir = Path(staging_dir)
        self.every_n_train_steps = every_n_train_steps
        self.interval_s = train_time_interval * 60 if train_time_interval else None
        self.save_on_validation = save_on_validation
        self.keep_last = keep_last
        self.monitor = monitor
        self.mode = mode
        self.final_upload_timeout_s = final_upload_timeout_s
        self.resumed_from = resumed_from
        self.resume_hint = resume_hint  # for the messages of a run that stops early
        self.uploader = Uploader(
            store, background=async_upload, retries=upload_retries, wait_s=store.timeout_s
        )
        self._committed: dict[str, Manifest] = {m.name: m for m in store.manifests()}
        self._last_saved_step = -1
        self._last_save_time = time.monotonic()
        self.timings: list[SaveTiming] = []  # rank 0's saves, in order (benchmarks read it)

    # -- triggers ---------------------------------------------------------------------------
    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        step = trainer.global_step
        if step == self._last_saved_step or trainer.fit_loop._should_accumulate():
            return
        if trainer.should_stop:
            # Fit ends after this batch: the final validation (callbacks/final_validation.py)
            # or train end saves this step, with its metrics, so it is ranked.
            return
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            # A save here would come before the epoch-end validation, and a run resumed
            # from it diverges (it replays that boundary differently); the epoch-end hooks
            # below save instead.
            return
        due = self._steps_due(step)
        if self.interval_s is not None:
            elapsed = torch.tensor(time.monotonic() - self._last_save_time)
            # Rank 0's clock decides, so every rank enters the (collective) save together.
            due = due or bool(trainer.strategy.broadcast(elapsed, src=0) >= self.interval_s)
        if due:
            self.save(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._steps_due(trainer.global_step):
            self.save(trainer)

    def _steps_due(self, step: int) -> bool:
        return bool(self.every_n_train_steps) and step % self.every_n_train_steps == 0

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Checked at the sanity validation, before any training step (or, with
        # num_sanity_val_steps=0, at the first validation).
        if self.monitor and self.monitor not in trainer.callback_metrics:
            logged = sorted(
                k for k in trainer.callback_metrics if not k.endswith(("_step", "_epoch"))
            )
            raise ConfigError(
                f"checkpoint.monitor={self.monitor} (optimized_metric) was not logged by the "
                f"{'sanity' if trainer.sanity_checking else 'first'} validation, so no "
                f"checkpoint could ever rank best; logged: "
                f"{', '.join(logged) or 'nothing'}. Set optimized_metric to one of them "
                "(and optimized_mode to min or max)"
            )
        if self.save_on_validation and not trainer.sanity_checking:
            self.save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.save(trainer, final=True)

    # -- saving -------------------------------------------------------------------------------
    def save(self, trainer: L.Trainer, block: bool = True, final: bool = False) -> None:
        """Called on every rank (saving is collective); rank 0 writes and uploads.

        block=False: hand the upload over and return at once (a preempted run's last save).
        A disk with no space left fails a save with one warning and training goes on (the
        newest complete checkpoints are kept); for a `final` save (the one a run ends with)
        it raises FinalSaveFailed instead.
        """
        step = trainer.global_step
        if step == self._last_saved_step or trainer.sanity_checking:
            return
        previous, self._last_saved_step = self._last_saved_step, step
        self._last_save_time = time.monotonic()
        started = time.perf_counter(), time.process_time()
        name = checkpoint_name(step)
        local = Path(self.store.path(name)) if self.store.is_local else self.staging_dir / name
        failure = _write(trainer, local)
        if final and trainer.world_size > 1:  # every rank stops, or none
            failure = trainer.strategy.broadcast(failure, src=0)
        if failure is not None:
            self._last_saved_step = previous  # a later save of this step tries again
            self._failed_save(step, failure, final)
            return
        if trainer.is_global_zero:
            self._submit(trainer, local, step, block, started)

    def _submit(
        self, trainer: L.Trainer, local: Path, step: int, block: bool, started: tuple[float, float]
    ) -> None:
        """Rank 0: the written checkpoint's marker, its upload, and the save's timing."""
        metric = trainer.callback_metrics.get(self.monitor) if self.monitor else None
        value = float(metric) if metric is not None and math.isfinite(float(metric)) else None
        if local.is_dir():
            check_all_shards(local, trainer.world_size, self.staging_dir)
        manifest = Manifest(local.name, step, *digest(local), value)
        if not self.store.is_local:  # the staged copy is complete: a rerun may upload it
            local.with_name(local.name + MARKER_SUFFIX).write_text(manifest.to_json())
        self.uploader.submit(local, manifest, after_commit=self._on_commit, block=block)
        wall, cpu = started
        self.timings.append(
            SaveTiming(step, time.perf_counter() - wall, time.process_time() - cpu, manifest.bytes)
        )

    def _failed_save(self, step: int, failure: str, final: bool) -> None:
        newest = max(self._committed.values(), key=lambda m: m.step, default=None)
        kept = (
            f"the newest complete checkpoint is step {newest.step} ({self.best_url(newest)})"
            if newest is not None
            else "no checkpoint is complete yet"
        )
        if final:
            raise FinalSaveFailed(
                f"the final checkpoint (step {step}) could not be written: {failure}; {kept}. "
                f"Free some space: {self.resume_hint} from it"
            )
        log.warning(
            "checkpoint of step %d not written: %s; training goes on, %s", step, failure, kept
        )

    def finish(self, timeout_s: float | None = None) -> None:
        """Wait for every upload (up to `timeout_s`, default final_upload_timeout_s); raises
        UploadsPending naming the local copies if the store stayed unreachable."""
        try:
            self.uploader.flush(self.final_upload_timeout_s if timeout_s is None else timeout_s)
        finally:
            self.uploader.close()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self.uploader.close()  # queued uploads stay staged; a rerun uploads them

    # -- retention ----------------------------------------------------------------------------
    def _on_commit(self, manifest: Manifest) -> None:
        if not self.store.is_local:
            (self.staging_dir / (manifest.name + MARKER_SUFFIX)).unlink(missing_ok=True)
        self._committed[manifest.name] = manifest
        for name in sorted(set(self._committed) - self._keep()):
            try:
                self.store.delete(name)
            except Exception as err:  # noqa: BLE001 - a failed cleanup loses nothing
                log.warning("could not delete old checkpoint %s from %s: %s", name, self.store, err)
                continue
            del self._committed[name]

    def _keep(self) -> set[str]:
        by_step = sorted(self._committed.values(), key=lambda m: m.step)
        keep = {m.name for m in by_step[-max(1, self.keep_last) :]}
        best = self.best()
        if best is not None:
            keep.add(best.name)
        if self.resumed_from:
            keep.add(self.resumed_from)
        return keep

    def best(self) -> Manifest | None:
        """The committed checkpoint with the best monitored value, the older one on ties: a
        save between validations carries the last validation's value, measured on the
        weights of the save at that validation, the oldest with it."""
        scored = [m for m in self._committed.values() if m.metric is not None]
        if not scored:
            return None
        sign = 1.0 if self.mode == "max" else -1.0
        return max(scored, key=lambda m: (sign * m.metric, -m.step))

    def agreed_best(self, trainer: L.Trainer) -> Manifest | None:
        """Rank 0's best on every rank: only rank 0 commits uploads, and every rank must
        test the same checkpoint (a sharded one needs them all)."""
        return trainer.strategy.broadcast(self.best() if trainer.is_global_zero else None, src=0)

    def best_url(self, best: Manifest | None) -> str | None:
        """Where `best` lives in the store (a path for a local store)."""
        if best is None:
            return None
        return self.store.path(best.name) if self.store.is_local else f"{self.store}/{best.name}"

    def best_local_path(self, best: Manifest | None) -> Path | None:
        """`best` as a local file or directory (downloaded if the store is remote)."""
        if best is None:
            return None
        return self.store.local_copy(best.name, self.staging_dir, "best")


def _write(trainer: L.Trainer, local: Path) -> str | None:
    """Save the full training state to `local` (collective: every rank takes part); a disk
    with no space left is the failure's one-line description instead of an error."""
    try:
        trainer.save_checkpoint(local, weights_only=False)  # the full state, not weights only
        return None
    except OSError as err:
        if err.errno not in _NO_SPACE:
            raise
        trainer.strategy.barrier("Trainer.save_checkpoint")  # the one the failed save skipped
        if local.is_dir():
            shutil.rmtree(local, ignore_errors=True)
        else:
            local.unlink(missing_ok=True)
        return f"{err.strerror or err} ({local})"
