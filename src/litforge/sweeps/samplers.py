"""The study's sampler, pruner and direction from hydra.sweeper: a name (`tpe`) with its
`*_options`, or an object node (`{_target_: optuna.samplers.TPESampler, seed: 1234}`, as
lightning-hydra-template's configs write it for hydra-optuna-sweeper).

The sampler is rebuilt for every trial with a seed of its own, a hash of (seed, study name,
trial number): workers with different seeds, and restarts, never draw the same trial, and
rerunning a one-worker sweep draws the same trials again (QMC keeps one seed: its points are
one scrambled sequence the study indexes; the grid none: its order is the same for all).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from litforge.errors import ConfigError
from litforge.sweeps.settings import SweeperSettings

log = logging.getLogger("litforge")


class CountedGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, which the sweep stops itself: Optuna's calls `study.stop()`
    after the last point, which raises outside `study.optimize` (the ask-and-tell loop)."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


SAMPLERS: dict[str, type] = {
    "tpe": optuna.samplers.TPESampler,
    "random": optuna.samplers.RandomSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "grid": CountedGridSampler,
    "nsgaii": optuna.samplers.NSGAIISampler,
    "gp": optuna.samplers.GPSampler,
    "qmc": optuna.samplers.QMCSampler,
}
# Samplers whose draws come from one sequence the study indexes (QMC's scrambled Sobol
# points): one seed for the whole study, or each trial would scramble another sequence.
STUDY_SEEDED = {"qmc"}
# Optuna's grid shuffles its points by the seed and numbers them in that order: a seed per
# trial (or per worker) would give the same number to another point, and run some twice.
UNSEEDED = {"grid"}
PRUNERS = {
    "median": optuna.pruners.MedianPruner,
    "halving": optuna.pruners.SuccessiveHalvingPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "none": optuna.pruners.NopPruner,
}
DIRECTIONS = {"min": "minimize", "max": "maximize", "minimize": "minimize", "maximize": "maximize"}


def trial_seed(seed: int, study_name: str, number: int) -> int:
    """The sampler seed of the study's trial `number` (32 bits, as numpy takes)."""
    digest = hashlib.sha256(f"{seed}\n{study_name}\n{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def is_object(node: Any) -> bool:
    return (OmegaConf.is_dict(node) or isinstance(node, Mapping)) and "_target_" in node


def base_seed(settings: Mapping[str, Any]) -> int | None:
    """The sweep's seed: the sampler object's own `seed`, else hydra.sweeper.seed."""
    sampler = settings.get("sampler")
    seed = sampler.get("seed") if is_object(sampler) else None
    seed = settings.get("seed") if seed is None else seed
    return None if seed is None else int(seed)


def sampler_factory(
    settings: Mapping[str, Any],
    grid: Callable[[], dict[str, list[Any]]],
    study_name: str,
    parallel: bool = False,
) -> Callable[[int], optuna.samplers.BaseSampler]:
    """trial number -> the sampler that draws it. Checked once here (a bad name or option
    is one line before any trial). `parallel` (trials asked while others run): TPE takes
    the running trials' parameters into account (Optuna's constant liar) unless its options
    say otherwise."""
    node = settings.get("sampler", SweeperSettings.sampler)
    if isinstance(node, optuna.samplers.BaseSampler):  # built by Hydra (`_recursive_: true`)
        return lambda number: node
    seed = base_seed(settings)

    def seeded(number: int) -> int | None:
        return None if seed is None else trial_seed(seed, study_name, number)

    if is_object(node):
        plain = (
            OmegaConf.to_container(node, resolve=True)
            if isinstance(node, DictConfig)
            else dict(node)
        )
        if parallel and str(plain["_target_"]).rsplit(".", 1)[-1] == "TPESampler":
            plain.setdefault("constant_liar", True)

        def build_object(number: int) -> optuna.samplers.BaseSampler:
            try:
                return instantiate({**plain, "seed": seeded(number)})
            except Exception as err:  # noqa: BLE001 - Hydra wraps the sampler's own error
                cause = err.__cause__ or err
                raise ConfigError(f"hydra.sweeper.sampler={plain['_target_']}: {cause}") from None

        build_object(0)
        return build_object
    name = str(node)
    cls = _named(SAMPLERS, name, "hydra.sweeper.sampler")
    options = _accepted(cls, dict(settings.get("sampler_options") or {}), "sampler_options")
    if name == "grid":
        options.setdefault("search_space", grid())
    if parallel and name == "tpe":
        options.setdefault("constant_liar", True)

    def build(number: int) -> optuna.samplers.BaseSampler:
        seed_of_trial = (
            None if name in UNSEEDED else seed if name in STUDY_SEEDED else seeded(number)
        )
        return _construct(cls, {**options, "seed": seed_of_trial}, "hydra.sweeper.sampler_options")

    build(0)
    return build


def pruner_for(settings: Mapping[str, Any]) -> optuna.pruners.BasePruner:
    """hydra.sweeper.pruner (a name with hydra.sweeper.pruner_options, or an object node)."""
    node = settings.get("pruner", "none")
    if is_object(node):
        try:
            return instantiate(node)
        except Exception as err:  # noqa: BLE001
            raise ConfigError(
                f"hydra.sweeper.pruner={node['_target_']}: {err.__cause__ or err}"
            ) from None
    name = str(node)
    cls = _named(PRUNERS, name, "hydra.sweeper.pruner")
    if name == "none":  # `pruner=none` on the command line keeps a config's options moot
        return cls()
    options = _accepted(cls, dict(settings.get("pruner_options") or {}), "pruner_options")
    return _construct(cls, options, "hydra.sweeper.pruner_options")


def directions_for(settings: Mapping[str, Any]) -> list[str]:
    """hydra.sweeper.direction: one (min | max) or a list, one per objective."""
    given = settings.get("direction")
    many = OmegaConf.is_list(given) or isinstance(given, list | tuple)
    names = [str(d) for d in given] if many else [str(given)]
    if not names:
        raise ConfigError("hydra.sweeper.direction=[] needs one direction per objective")
    return [DIRECTIONS[str(_named(DIRECTIONS, n, "hydra.sweeper.direction"))] for n in names]


def _named(table: Mapping[str, Any], name: str, key: str) -> Any:
    if name not in table:
        raise ConfigError(f"{key}={name} is not one of: {', '.join(table)}")
    return table[name]


def _accepted(cls: type, options: dict[str, Any], key: str) -> dict[str, Any]:
    """The options `cls` takes; the others (another sampler's, after
    `hydra.sweeper.sampler=random` on the command line) dropped with one warning line."""
    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return options
    dropped = sorted(set(options) - set(params))
    if dropped:
        log.warning(
            "hydra.sweeper.%s: %s takes no %s; dropped (it takes: %s)",
            key, cls.__name__, ", ".join(dropped), ", ".join(p for p in params if p != "self"),
        )  # fmt: skip
    return {k: v for k, v in options.items() if k not in dropped}


def _construct(cls: type, options: dict[str, Any], key: str) -> Any:
    try:
        with warnings.catch_warnings():  # QMC, GP: "experimental", on every trial
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{key}: {cls.__name__} refused {options}: {err}") from None
