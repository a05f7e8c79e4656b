"""Early stopping: Lightning's `EarlyStopping` on the run's `optimized_metric` by default,
with a metric the model never logs said in one line at the first validation. Its state
(best value, evaluations without improvement) is in every checkpoint, so a killed run
resumed goes on counting; a stopped run reports its best value (what a sweep records)."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping
from torch import Tensor

from litforge import console
from litforge.errors import ConfigError

KEY = "callbacks.early_stopping"


class EarlyStop(EarlyStopping):
    def __init__(self, monitor: str, mode: str = "min", patience: int = 3, **kwargs: Any) -> None:
        if mode not in ("min", "max"):
            raise ConfigError(f"{KEY}.mode={mode!r} must be min or max")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"{KEY}.patience={patience!r} must be an integer >= 1")
        super().__init__(monitor=monitor, mode=mode, patience=patience, **kwargs)

    def _validate_condition_metric(self, logs: dict[str, Tensor]) -> bool:
        if self.monitor not in logs and self.strict:
            logged = ", ".join(sorted(k for k in logs if not k.startswith("train/"))) or "none"
            raise ConfigError(
                f"{KEY}.monitor={self.monitor} is not logged at validation (logged: {logged}); "
                "set it, or optimized_metric, to one of those"
            )
        return super()._validate_condition_metric(logs)

    def best_value(self) -> float | None:
        """The best monitored value so far; None before the first evaluation."""
        value = float(self.best_score)
        return value if abs(value) != float("inf") else None

    def final_metrics(self, trainer: L.Trainer) -> dict[str, float]:
        """For the run record (the hook litforge.hooks.ReportsFinalMetrics)."""
        return best_if_stopped(self, trainer)


def best_if_stopped(callback: EarlyStopping, trainer: L.Trainer) -> dict[str, float]:
    """A run early stopping ended reports the best value of its monitored metric (its last
    validations were the ones without improvement); any other run nothing."""
    if callback.wait_count < callback.patience:
        return {}
    best = float(callback.best_score)
    if abs(best) == float("inf"):
        return {}
    console.info("early stopping: stopped at step %d; best %s=%.6g",
                 trainer.global_step, callback.monitor, best)  # fmt: skip
    return {str(callback.monitor): best}
