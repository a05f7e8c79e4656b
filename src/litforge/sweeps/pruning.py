"""Report the optimized metric to this run's Optuna trial; stop when pruned or not finite."""

from __future__ import annotations

import math

import lightning as L

from litforge.errors import ConfigError
from litforge.sweeps.study import STOPPED, trial_of_this_job


class OptunaPruning(L.Callback):
    """After each validation: report `monitor` at the global step to trial `trial` (set per
    run by the Optuna sweeper; None outside a sweep, and then this does nothing) and stop the
    run when the pruner says so, or when the value is NaN/inf (the trial fails).

    Only rank 0 talks to the study; its decision is broadcast, so all ranks stop together.
    The outcome is written to the trial itself, where the sweeper reads it after the run.
    """

    def __init__(self, monitor: str, trial: int | None = None) -> None:
        self.monitor = monitor
        self.trial_number = trial
        self._trial = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.trial_number is not None and stage == "fit" and trainer.is_global_zero:
            self._trial = trial_of_this_job(self.trial_number)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.trial_number is None:
            return
        if self.monitor not in trainer.callback_metrics:  # same keys on every rank
            logged = ", ".join(sorted(trainer.callback_metrics)) or "nothing"
            raise ConfigError(
                f"optimized_metric={self.monitor} was not logged by the first validation; "
                f"logged: {logged}. Set optimized_metric to one of them"
            )
        stop = self._report(trainer) if trainer.is_global_zero else ""
        if trainer.strategy.broadcast(stop, src=0):
            trainer.should_stop = True

    def _report(self, trainer: L.Trainer) -> str:
        """Rank 0: the reason to stop ('' to go on), recorded on the trial."""
        assert self._trial is not None
        value = float(trainer.callback_metrics[self.monitor])
        step = trainer.global_step
        if not math.isfinite(value):
            reason = f"not finite: {self.monitor}={value} at step {step}"
        else:
            frozen = self._trial.study._storage.get_trial(self._trial._trial_id)
            if step not in frozen.intermediate_values:
                self._trial.report(value, step)
            if not self._trial.should_prune():
                return ""
            reason = f"pruned at step {step} ({self.monitor}={value:.6g})"
        self._trial.storage.set_trial_system_attr(self._trial._trial_id, STOPPED, reason)
        return reason
