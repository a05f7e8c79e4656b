"""How the numerics watch ends a run: under policy stop a checkpoint where a resume finds
it (unless the weights are already broken), the upload waited for, one error; under any
policy, one error when training ends with weights that are not finite."""

from __future__ import annotations

from typing import NoReturn

import lightning as L

from litforge.checkpointing.callback import StoreCheckpoint
from litforge.checkpointing.uploader import UploadsPending
from litforge.errors import LitforgeError
from litforge.monitors.numerics.probes import weights_finite


class NumericsFault(LitforgeError):
    """Training stopped on a non-finite loss or gradient (callbacks.numerics.policy=stop).

    Exit status 65 (sysexits' EX_DATAERR): the numbers went bad, not the program or config.
    """

    exit_code = 65
    interrupts = False  # in a sweep: a failed trial, not one to run again


def stop(trainer: L.Trainer, summary: str, step: int) -> NoReturn:
    """Save with the checkpoint callback that preemption uses too, wait for the upload as
    preemption does, then raise NumericsFault for the fault `summary` at `step`."""
    saver = next((c for c in trainer.callbacks if isinstance(c, StoreCheckpoint)), None)  # type: ignore[attr-defined]
    where, then = "saved no checkpoint (checkpoint=none)", "a rerun starts over"
    if saver is not None and not weights_finite(trainer.lightning_module, trainer.strategy):
        # An update before the fault (a vanishing eps, say) broke the weights: a
        # checkpoint of them is no state to resume; the newest complete one stays newest.
        where = "saved no checkpoint (the weights are already non-finite)"
        then = f"{saver.resume_hint} from the newest complete checkpoint in {saver.store}, if any"
    elif saver is not None:
        saver.save(trainer, final=True)
        location = str(saver.store)
        try:
            saver.finish(timeout_s=saver.store.timeout_s)
        except UploadsPending:
            location = f"{saver.staging_dir} (not uploaded yet; the next run uploads it)"
        where = f"saved a checkpoint at step {trainer.global_step} to {location}"
        then = f"{saver.resume_hint} from that checkpoint"
    raise NumericsFault(
        f"{summary} at step {step}: skipped it, {where} and stopped "
        f"(callbacks.numerics.policy=stop). Try the fixes listed above; {then}"
    )


def fail_if_weights_broken(trainer: L.Trainer, policy: str, first_fault: int | None) -> None:
    """warn (and skip, past an update that broke the weights) trains on to the end: weights
    that are not finite there must not end the run as a success whose metrics are NaN and
    whose best checkpoint is broken. Raises NumericsFault on every rank together."""
    if weights_finite(trainer.lightning_module, trainer.strategy):
        return
    since = "" if first_fault is None else f"; the first fault was at step {first_fault}"
    advice = "" if policy == "stop" else (
        "; callbacks.numerics.policy=stop stops at the first fault and saves a checkpoint to "
        "resume from"
    )  # fmt: skip
    raise NumericsFault(
        f"the weights are not finite at the end of training (step {trainer.global_step}, "
        f"callbacks.numerics.policy={policy}{since}): the run's metrics and its latest "
        f"checkpoints are not usable, and it was not tested. Try the fixes listed above{advice}"
    )
