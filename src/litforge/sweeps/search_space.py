"""A sweep's search space: Hydra's sweep syntax -> Optuna distributions.

`hydra.sweeper.params` (and sweep overrides on the command line) use the syntax
lightning-hydra-template users know:

    model.optimizer.lr: tag(log, interval(1e-4, 1e-1))  -> FloatDistribution(log=True)
    model.net.hidden: int(interval(32, 256))            -> IntDistribution
    data.batch_size: choice(32, 64, 128)                 -> CategoricalDistribution
    model.net.n_layer: range(1, 4)                       -> IntDistribution(1, 3)
    model.optimizer.lr=1e-3,3e-3 (command line)          -> CategoricalDistribution

A plain value is a fixed override every trial gets; on the command line it also takes its
key out of the search (`model.net.hidden=64` pins what `params` would search), as
hydra-optuna-sweeper does. Nothing to search is a space too, as upstream has it: every
trial runs the same config (repeats).
"""

from __future__ import annotations

import difflib
import inspect
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    check_distribution_compatibility,
)

from litforge.errors import ConfigError
from litforge.validation.targets import locate, signature_of

log = logging.getLogger("litforge")
PARAMS_KEY = "hydra.sweeper.params"
_ABSENT = object()


@dataclass
class SearchSpace:
    """What Optuna samples (by parameter name) and what every trial gets as is."""

    distributions: dict[str, BaseDistribution] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # name -> override key (`+name` adds)
    fixed: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)  # searched in params, fixed on the command line

    def overrides(self, params: Mapping[str, Any]) -> list[str]:
        """The command-line overrides of one trial with these sampled values (a parameter
        a custom_search_space function suggested is its own key)."""
        sampled = [
            f"{self.keys.get(name, name)}={override_value(value)}" for name, value in params.items()
        ]
        return [*self.fixed, *sampled]

    def grid(self) -> dict[str, list[Any]]:
        """Every value of every parameter, for the grid sampler; continuous ones refused."""
        grid: dict[str, list[Any]] = {}
        for name, dist in self.distributions.items():
            if isinstance(dist, CategoricalDistribution):
                grid[name] = list(dist.choices)
            elif isinstance(dist, IntDistribution) and not dist.log:
                grid[name] = list(range(dist.low, dist.high + 1, dist.step))
            else:
                raise ConfigError(
                    f"{PARAMS_KEY}.{name}: hydra.sweeper.sampler=grid needs a finite set of "
                    "values: use choice(...) or range(...), not interval(...)"
                )
        return grid


def parse(
    params: Mapping[str, Any] | None,
    arguments: Iterable[str],
    config: DictConfig,
    is_group: Callable[[str], bool] = lambda name: False,
) -> SearchSpace:
    """The search space of `params` (hydra.sweeper.params) plus the command-line arguments,
    every parameter checked against the composed `config`."""
    # (where a mistake is reported, the override line, from the command line): config
    # entries by their key
    lines = [(f"{PARAMS_KEY}.{k}: {v!r}", f"{k}={v}", False) for k, v in (params or {}).items()]
    lines += [(line, line, True) for line in arguments]
    parser = OverridesParser.create()
    space = SearchSpace()
    for where, line, given in lines:
        try:
            (override,) = parser.parse_overrides([line])
        except HydraException as err:
            first = str(err).strip().splitlines()
            raise ConfigError(f"{where}: cannot parse it ({' '.join(first[:2])})") from None
        name = override.key_or_group
        if not override.is_sweep_override():
            space.fixed.append(line)
            if given and space.distributions.pop(name, None) is not None:
                space.keys.pop(name, None)
                space.pinned.append(name)
            continue
        # A config group (`experiment=choice(a, b)`, `@package _global_` ones too) is an
        # option name per trial, not a key of the composed config.
        if not override.is_add() and not override.is_force_add() and not is_group(name):
            _check_known(name, where, config)
        space.distributions[name] = distribution(override, where)
        space.keys[name] = override.get_key_element()
    return space


def distribution(override: Override, where: str) -> BaseDistribution:
    """The Optuna distribution of one sweep override."""
    sweep = override.value()
    if isinstance(sweep, ChoiceSweep | RangeSweep):
        sweep.shuffle = False  # shuffle(...) means nothing to a sampler: the space as written
    try:
        if isinstance(sweep, IntervalSweep):
            is_log = "log" in sweep.tags
            if isinstance(sweep.start, int) and isinstance(sweep.end, int):
                return IntDistribution(sweep.start, sweep.end, log=is_log)
            return FloatDistribution(float(sweep.start), float(sweep.end), log=is_log)
        if isinstance(sweep, RangeSweep):
            values = list(override.sweep_iterator())
            if not values:
                raise ValueError("the range is empty")
            if all(isinstance(v, int) for v in values) and len(values) > 1:
                values = sorted(values)  # range(5, 1, -1) searches the same set as range(2, 6)
                log.warning(
                    "%s: range(...) searches %s..%s: Hydra's range leaves out its stop, "
                    "hydra-optuna-sweeper's included it (a config ported from it searched %s..%s)",
                    where, values[0], values[-1], values[0], values[-1] + (values[1] - values[0]),
                )  # fmt: skip
                return IntDistribution(values[0], values[-1], step=values[1] - values[0])
            return CategoricalDistribution(values)
        if isinstance(sweep, ChoiceSweep):
            values = list(override.sweep_iterator())
            for value in values:
                if not (value is None or isinstance(value, bool | int | float | str)):
                    raise ValueError(f"choice values must be plain values, not {value!r}")
            return CategoricalDistribution(values)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
    raise ConfigError(
        f"{where}: not a distribution: use interval(a, b), "
        "tag(log, interval(a, b)), int(interval(a, b)), choice(...) or range(...)"
    )


def check_against_study(space: SearchSpace, study: Any) -> None:
    """A rerun whose space Optuna cannot continue (a choice's values changed, a float
    became a choice): one line naming the parameter and both spaces, before any trial."""
    stored: dict[str, BaseDistribution] = {}
    for trial in study.get_trials(deepcopy=False):
        stored.update(trial.distributions)
    for name, new in space.distributions.items():
        old = stored.get(name)
        if old is None:
            continue
        try:
            check_distribution_compatibility(old, new)
        except ValueError:
            raise ConfigError(
                f"{name}: study {study.study_name} searched {old}, this sweep asks for {new}; "
                "Optuna cannot continue a study on another space: set a new "
                "hydra.sweeper.study_name (or hydra.sweep.dir) for it"
            ) from None


def say_pinned(space: SearchSpace, study: Any) -> None:
    """One line per key the command line pinned that the stored study searched."""
    searched = {name for t in study.get_trials(deepcopy=False) for name in t.distributions}
    for name in space.pinned:
        if name in searched:
            log.warning(
                "%s is fixed on the command line: it leaves the search of study %s (its "
                "earlier trials sampled it)", name, study.study_name,
            )  # fmt: skip


def override_value(value: Any) -> str:
    """A sampled value as Hydra's override grammar reads it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int | float):
        return repr(value)
    escaped = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _check_known(name: str, where: str, config: DictConfig) -> None:
    if (
        OmegaConf.select(config, name, default=_ABSENT, throw_on_resolution_failure=False)
        is not _ABSENT
    ):
        return
    parent, _, leaf = name.rpartition(".")
    node = OmegaConf.select(config, parent, default=None) if parent else config
    if isinstance(node, DictConfig) and "_target_" in node:
        default = _default_of(node, leaf)
        if default is not _ABSENT:
            raise ConfigError(
                f"{where}: {name} is an argument of {node['_target_']} (default {default!r}) "
                f"that the config does not set; sweep it as +{name}, or set it in the config"
            )
    known = [str(k) for k in node] if isinstance(node, DictConfig) else []
    close = difflib.get_close_matches(leaf, known, n=1)
    hint = f"did you mean {(parent + '.' if parent else '') + close[0]}? " if close else ""
    raise ConfigError(
        f"{where}: {name} is not a key of the composed config; {hint}"
        f"a new key is added with +{name}"
    )


def _default_of(node: DictConfig, leaf: str) -> Any:
    """`leaf`'s default in the signature of the node's `_target_`; _ABSENT when `leaf` is
    not a keyword argument of it (or the target does not import)."""
    try:
        target = locate(node, "")
    except ConfigError:  # reported where the config is checked
        return _ABSENT
    signature = signature_of(target)
    param = signature.parameters.get(leaf) if signature is not None else None
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if param is None or param.kind not in keyword or param.default is inspect.Parameter.empty:
        return _ABSENT
    return param.default
