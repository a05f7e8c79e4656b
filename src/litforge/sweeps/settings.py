"""hydra.sweeper.* of litforge's Optuna sweeper: the keys, their defaults and docs
(conf/hydra/sweeper/optuna.yaml is generated from SweeperSettings), checked before the
study opens: an unknown key is one line naming it and the accepted ones. The values with
rules of their own (sampler and pruner names, the search space, the storage) are checked
where they are built, with what is valid for each."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hydra.utils import get_method

from litforge.errors import ConfigError
from litforge.settings import Settings, key
from litforge.settings.rules import Free, Int, Num, OneOf, Text

DIRECTIONS = "min | max (or a list, one per objective)"


@dataclass(frozen=True)
class SweeperSettings(Settings):
    """litforge's Optuna sweeper (hparams_search=...)."""

    GROUP = "hydra.sweeper"
    TITLE = "hydra.sweeper (litforge's Optuna sweeper)"
    GROUP_FILE = "hydra/sweeper/optuna.yaml"
    NODE = ""  # the file is the node: Hydra's hydra/sweeper group puts it at hydra.sweeper
    TARGET = "hydra_plugins.litforge_optuna.optuna_sweeper.OptunaSweeper"
    RECURSIVE = False  # a sampler object node is built per trial, with that trial's seed
    HEADER = """
litforge's Optuna sweeper (src/hydra_plugins/litforge_optuna): pick it with an
hparams_search config, e.g. `python train.py -m hparams_search=digits_optuna`.
Rerunning the same command resumes the study; several workers may share one storage.
"""

    study_name: str | None = key(
        "${task_name}",
        Text(null=True),
        "one study per name in a storage (null: the job name); hparams_search configs name theirs",
    )
    storage: str | None = key(
        None,
        Text(null=True),
        "null: a journal file in the sweep directory (hydra.sweep.dir/optuna.journal; a sweep directory named after the time becomes multirun/<task>/<study_name>, or multirun/<task>/<hparams_search option> for a study left unnamed, so that a rerun finds it). A path: a journal file (on shared storage for workers on many machines). A SQLAlchemy URL: sqlite:///sweep.db, postgresql://user@host/db (the password from PGPASSWORD, not the URL). A journal's or sqlite file's directory must exist.",
    )
    n_trials: int = key(
        20, Int(1), "finished trials (complete, pruned, failed) the study should hold"
    )
    n_jobs: int = key(
        1,
        Int(1),
        "trials at once: launched per batch, or under hydra/launcher=gpus at most this many running, each started as soon as its devices free (hydra.sweeper.schedule); > 1 with a parallel launcher",
    )
    schedule: str = key(
        "trials",
        OneOf(("trials", "batches")),
        "trials: under hydra/launcher=gpus a trial is asked and started the moment devices for it free (TPE sees the running trials' parameters: constant liar); batches: n_jobs trials asked together, the next batch once all of them have ended (Hydra's protocol; every other launcher runs so).",
        error="{key}={value}: give trials (each trial started as its devices free, under "
        "hydra/launcher=gpus) or batches (n_jobs at a time)",
    )
    direction: Any = key(
        "${optimized_mode}",
        Free(),
        f"{DIRECTIONS}, from the experiment's optimized_mode. Set here with optimized_mode left out (lightning-hydra-template's configs), it sets optimized_mode: checkpoints and early stopping rank by it; a mode set against it is one warning line.",
    )
    sampler: Any = key(
        "tpe",
        Free(),
        "tpe | random | cmaes | grid (grid: choice/range params only) | nsgaii | gp | qmc, or an object: {_target_: optuna.samplers.TPESampler, seed: 1234, n_startup_trials: 10}. Each trial's sampler is seeded by a hash of (seed, study name, trial number).",
    )
    sampler_options: dict[str, Any] = key(
        {}, Free(), "keyword arguments of a named sampler, e.g. {n_startup_trials: 5}"
    )
    pruner: str | None = key(
        "median",
        Free(),
        "median | halving | hyperband | none (none for a grid; a config that names no pruner, such as an upstream sweeper's, gets none)",
    )
    pruner_options: dict[str, Any] = key(
        {}, Free(), "keyword arguments of the pruner, e.g. {n_warmup_steps: 100}"
    )
    seed: Any = key(
        "${seed}", Free(), "the sweep's seed (a sampler object's own `seed` takes precedence)"
    )
    heartbeat_s: float = key(
        30, Num(0.0, open_lo=True), "how often a worker renews the lease of each trial it runs"
    )
    stale_s: float = key(
        300,
        Num(0.0, open_lo=True),
        "a running trial whose lease is older is retried by another worker (at once when its worker ran on this machine and is gone)",
    )
    params: dict[str, Any] = key(
        {},
        Free(),
        "the search space: KEY: interval(a, b) | tag(log, interval(a, b)) | int(interval(a, b)) | choice(a, b, ...) | range(start, stop[, step]) (nothing to search: n_trials repeats of the same config)",
    )
    custom_search_space: str | None = key(
        None,
        Text(null=True),
        "my_lab.search.extend: called (cfg, trial) to suggest more parameters",
    )
    max_failure_rate: float = key(
        1.0,
        Num(0.0, 1.0),
        "stop when more than this share of a batch's trials fail (trial by trial: of the last n_jobs to end; upstream: 0.0)",
        error="{key}={value} must be a number in [0, 1]",
    )


# In the fields' order: the unknown-key line lists them so.
ACCEPTED = tuple(f.name for f in dataclasses.fields(SweeperSettings))


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
    if "max_failure_rate" not in settings:
        return float(SweeperSettings.max_failure_rate)
    return float(
        SweeperSettings.checked(max_failure_rate=settings["max_failure_rate"]).max_failure_rate
    )


def schedule(settings: Mapping[str, Any]) -> str:
    """hydra.sweeper.schedule: trials (one by one as devices free) or batches."""
    given = settings.get("schedule", SweeperSettings.schedule)
    return str(SweeperSettings.checked(schedule=given).schedule)


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
