"""The keys of hydra.sweeper (conf/hydra/sweeper/optuna.yaml documents each), checked before
the study opens: an unknown key is one line naming it and the accepted ones."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from hydra.utils import get_method

from litforge.errors import ConfigError

ACCEPTED = (
    "study_name", "storage", "n_trials", "n_jobs", "direction", "sampler", "sampler_options",
    "pruner", "pruner_options", "seed", "heartbeat_s", "stale_s", "params",
    "custom_search_space", "max_failure_rate",
)  # fmt: skip


def check_keys(settings: Mapping[str, Any]) -> None:
    unknown = [k for k in settings if k not in ACCEPTED]
    if unknown:
        close = difflib.get_close_matches(unknown[0], ACCEPTED, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"hydra.sweeper.{unknown[0]} is not a key of litforge's Optuna sweeper{hint}; "
            f"it takes: {', '.join(ACCEPTED)}"
        )


def failure_rate_limit(settings: Mapping[str, Any]) -> float:
    """hydra.sweeper.max_failure_rate: the share of a batch's trials that may fail before
    the sweep stops (upstream's meaning); 1.0 (litforge's default) never stops it."""
    value = settings.get("max_failure_rate", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(f"hydra.sweeper.max_failure_rate={value} must be a number in [0, 1]")
    return float(value)


def search_space_extender(settings: Mapping[str, Any]) -> Callable[[Any, Any], None] | None:
    """hydra.sweeper.custom_search_space: a function `(cfg, trial) -> None` that suggests
    more parameters with `trial.suggest_*` (upstream's hook, e.g. for parameters that
    depend on each other); each suggested name is an override of the trial."""
    path = settings.get("custom_search_space")
    if path is None:
        return None
    try:
        return get_method(str(path))
    except Exception as err:  # noqa: BLE001 - Hydra wraps the ImportError
        raise ConfigError(
            f"hydra.sweeper.custom_search_space={path} cannot be imported as a function "
            f"({err.__cause__ or err}); give its dotted path, e.g. my_lab.search.extend"
        ) from None
