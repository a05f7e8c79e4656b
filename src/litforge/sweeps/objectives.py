"""What a trial is scored by: one objective, or several (`direction: [minimize, maximize]`
with `optimized_metric: [val/loss, val/acc]` in train.py, or a job returning a list or tuple
in a plain Hydra app). Checked before the first trial."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from litforge.errors import ConfigError

PRUNING_CALLBACK = "callbacks.optuna_pruning"


def objective_names(config: DictConfig, settings: Mapping[str, Any], count: int) -> list[str]:
    """The objectives' names (the recipe's metrics; `value`, `value_1`, ... for a plain
    app); one line when the metrics and directions disagree, or a multi-objective study is
    to be pruned (Optuna cannot prune one)."""
    given = config.get("optimized_metric")
    metrics = [str(m) for m in given] if OmegaConf.is_list(given) else None
    if metrics is not None and len(metrics) != count:
        raise ConfigError(
            f"hydra.sweeper.direction has {count} entr{'y' if count == 1 else 'ies'} and "
            f"optimized_metric {len(metrics)} ({', '.join(metrics)}): give one direction per metric"
        )
    if metrics is None and given is not None and count > 1:
        raise ConfigError(
            f"hydra.sweeper.direction has {count} entries but optimized_metric={given} is one "
            "metric: make it a list, one metric per direction"
        )
    if count > 1:
        pruner = settings.get("pruner", "none")
        if str(pruner) != "none":
            raise ConfigError(
                f"hydra.sweeper.pruner={pruner}: Optuna cannot prune a multi-objective study; "
                "set hydra.sweeper.pruner=none"
            )
        if OmegaConf.select(config, PRUNING_CALLBACK) is not None:
            raise ConfigError(
                f"{PRUNING_CALLBACK} reports one metric to the trial, which a multi-objective "
                f"study cannot take: drop it with ~{PRUNING_CALLBACK}"
            )
    if metrics is not None:
        return metrics
    if given is not None:
        return [str(given)]
    return ["value"] if count == 1 else [f"value_{i}" for i in range(count)]


def as_float(value: Any) -> float | None:
    """A returned value as an objective: anything float() takes (a numpy float, a 0-d
    tensor), as upstream converts it; None when it is not a finite number."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def values_of(returned: Any, count: int) -> list[float] | None:
    """The objective values of a job's return value; None when it does not give `count`
    finite numbers."""
    many = OmegaConf.is_list(returned) or isinstance(returned, Sequence | tuple)
    if isinstance(returned, str):
        many = False
    items = list(returned) if many else [returned]
    if len(items) != count:
        return None
    values = [as_float(v) for v in items]
    return None if any(v is None for v in values) else values  # type: ignore[return-value]
