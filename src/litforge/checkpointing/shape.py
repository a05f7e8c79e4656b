"""Resuming on another shape: another number of processes, another micro-batch.

Each checkpoint records the run's shape (micro-batch, accumulation, processes); the
micro-batch is what the train loader yields per process (`datamodule_facts.per_process_batch`:
a DataModule may divide its configured `batch_size` by the processes). A run that resumes
with another shape keeps the effective batch (micro-batch x accumulation x processes) by
changing `trainer.accumulate_grad_batches` when that divides; the data goes
on with exactly the samples not yet consumed (`litforge.data.global_order`), and
Lightning's count of the epoch's micro-batches is rewritten to the new micro-batch, so
accumulation steps on the same samples' boundaries. `resume_shape=strict` refuses any
change instead. Not bitwise across shapes: another number of processes or micro-batch sums
the same gradients in another order.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from litforge import console
from litforge.datamodule_facts import per_process_batch
from litforge.errors import ConfigError

MODES = ("adapt", "strict")


@dataclass(frozen=True)
class Shape:
    micro_batch: int
    accumulate: int
    processes: int

    @property
    def effective(self) -> int:
        return self.micro_batch * self.accumulate * self.processes

    def __str__(self) -> str:
        return (f"{self.processes} processes x {self.micro_batch} per batch x "
                f"trainer.accumulate_grad_batches={self.accumulate} = {self.effective}")  # fmt: skip


class ResumeShape(L.Callback):
    """Saves the shape in every checkpoint; on resume, adapts to the current one."""

    def __init__(self, mode: str = "adapt") -> None:
        if mode not in MODES:
            raise ConfigError(f"resume_shape={mode!r} must be one of: {', '.join(MODES)}")
        self.mode = mode
        self._micro: int | None = None  # this fit's per-process batch, read once

    def _current(self, trainer: L.Trainer) -> Shape | None:
        if self._micro is None:
            self._micro = per_process_batch(trainer)
        if self._micro is None:
            return None
        return Shape(self._micro, int(trainer.accumulate_grad_batches), int(trainer.world_size))

    def state_dict(self) -> dict[str, Any]:
        trainer = getattr(self, "_trainer", None)
        shape = self._current(trainer) if trainer is not None else None
        return asdict(shape) if shape is not None else {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer
        if stage == "fit":
            self._micro = None

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return  # trainer.test(ckpt_path=...) loads callbacks too; nothing resumes there
        saved = (checkpoint.get("callbacks") or {}).get(type(self).__qualname__) or {}
        now = self._current(trainer)
        if not saved or now is None:
            return
        before = _saved_shape(saved)
        if before == now:
            return
        after = self._adapted(before, now)
        trainer.accumulate_grad_batches = after.accumulate
        _rewrite_progress(checkpoint, before, after)
        if after == before:
            # The checkpoint's own shape: an earlier resume on another shape set its
            # accumulation, and the config still says the one it started with.
            console.info(
                "resuming with the checkpoint's own shape (%s): trainer.accumulate_grad_batches"
                " stays %d, not the configured %d, so the effective batch stays %d",
                before, after.accumulate, now.accumulate, before.effective,
            )  # fmt: skip
            return
        change = (
            f"trainer.accumulate_grad_batches {now.accumulate} -> {after.accumulate} keeps "
            f"the effective batch {before.effective}"
            if after.accumulate != now.accumulate
            else f"the effective batch stays {before.effective}"
        )
        console.info("resuming on another shape: was %s, now %s: %s", before, after, change)

    def _adapted(self, before: Shape, now: Shape) -> Shape:
        if self.mode == "strict":
            raise ConfigError(
                f"resume_shape=strict: the checkpoint was written by {before}, this run is "
                f"{now}; run with that shape, or resume_shape=adapt to keep the effective batch"
            )
        per_step = now.micro_batch * now.processes
        if before.effective % per_step:
            raise ConfigError(
                f"cannot keep the effective batch {before.effective} of the checkpoint ({before})"
                f" with {now.processes} processes x {now.micro_batch} per batch: "
                f"{before.effective} is not a multiple of {per_step}; pick a data.batch_size "
                f"that makes a per-process batch dividing "
                f"{before.effective // now.processes or before.effective}"
            )
        return Shape(now.micro_batch, before.effective // per_step, now.processes)


def _saved_shape(saved: Any) -> Shape:
    """The checkpoint's shape record; one ConfigError when it is not one litforge wrote (a
    checkpoint's bytes are checked, but anyone can write a well-formed one)."""
    fields = ("micro_batch", "accumulate", "processes")
    ok = isinstance(saved, dict) and set(saved) == set(fields)
    if not ok or not all(type(saved[f]) is int and saved[f] >= 1 for f in fields):
        raise ConfigError(
            f"the checkpoint's shape record {saved!r:.200} is not one litforge writes "
            f"({', '.join(fields)}: integers >= 1); resume from an intact checkpoint, or "
            "resume=never"
        )
    return Shape(**saved)


def _rewrite_progress(checkpoint: dict[str, Any], before: Shape, after: Shape) -> None:
    """Lightning counts the epoch's micro-batches per process: the same position in the
    data is another count at another micro-batch or number of processes."""
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    progress = loop.get("epoch_loop.batch_progress")
    if not progress:
        return
    done = progress["current"]["completed"]
    samples = done * before.micro_batch * before.processes
    now = samples // (after.micro_batch * after.processes)
    for counts in (progress["current"], progress["total"]):
        for key in ("ready", "started", "processed", "completed"):
            counts[key] += now - done
