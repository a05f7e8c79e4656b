"""SIGTERM (a cloud's spot notice) or SIGUSR1 (SLURM's `--signal`) -> checkpoint, then exit.

The handler only records the signal: no I/O, no collectives (Lightning's own SIGTERM
handler broadcasts from inside the handler). At the next optimizer-step boundary all
ranks agree through one max-reduce, save together, and stop.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

import lightning as L
import torch

from litforge.checkpointing.callback import StoreCheckpoint
from litforge.errors import LitforgeError

log = logging.getLogger("litforge")
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(LitforgeError):
    """Training stopped on a signal after saving; the same command resumes it.

    Exits with 128 + the signal's number, as a shell reports a process ended by it.
    """

    def __init__(
        self,
        signum: int,
        step: int,
        store: str,
        staged: str | None = None,
        resume_hint: str = "the same command resumes",
    ) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        name = signal.Signals(signum).name
        where = (
            f"{store}" if staged is None
            else f"{staged} (not uploaded to {store} in time; the next run uploads it)"
        )  # fmt: skip
        super().__init__(
            f"{name} received: saved a checkpoint at step {step} to {where} and stopped; "
            f"{resume_hint} from it"
        )


class Preemption(L.Callback):
    def __init__(self, checkpoint: StoreCheckpoint) -> None:
        self.checkpoint = checkpoint
        self.received: int = 0
        self.stopped_by: int = 0
        self._distributed = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # From setup on, not only from the first step: a spot notice during a long setup
        # (data, restore, the memory budget, sanity validation) must not be lost.
        for sig in SIGNALS:
            self._previous.setdefault(sig, signal.signal(sig, self._handle))
        self.received = self.received or max(map(_recorded_by, self._previous.values()))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Again over Lightning's handlers, registered after setup (they call ours too).
        for sig in SIGNALS:
            signal.signal(sig, self._handle)
        if trainer.received_sigterm:
            # Ours has it; Lightning would raise SIGTERMException after the first batch
            # without a checkpoint.
            self.received = self.received or signal.SIGTERM
            trainer._signal_connector.received_sigterm = False
        self._distributed = trainer.world_size > 1  # asked once: the next hook is per batch

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if not (self.received or self._distributed) or trainer.fit_loop._should_accumulate():
            return
        signum = self.received
        if self._distributed:  # a collective only when there are ranks to agree with
            flag = torch.tensor(float(signum), device=trainer.strategy.root_device)
            signum = int(trainer.strategy.reduce(flag, reduce_op="max"))
        if signum:
            log.warning(
                "%s received: saving a checkpoint before stopping", signal.Signals(signum).name
            )
            self.checkpoint.save(trainer, block=False, final=True)  # upload: not in the grace
            self.stopped_by = signum
            trainer.should_stop = True

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, err: BaseException
    ) -> None:
        # Installed from setup on, ours are what Lightning's signal connector saved when it
        # registered its own; it reinstates those after this hook on a failed run, so it
        # is given the handlers from before ours (a notebook keeps its own).
        saved = trainer._signal_connector._original_handlers
        for sig, handler in self._previous.items():
            if saved.get(sig) == self._handle:
                saved[sig] = handler
        self.teardown(trainer, pl_module, "fit")

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def _recorded_by(handler: Any) -> int:
    """The signal the handler replaced has recorded, if its owner keeps one as `received`
    (a sweep's watch, `litforge.sweeps.signals.SignalWatch`, since the trial began)."""
    return int(getattr(getattr(handler, "__self__", None), "received", None) or 0)
