"""The optimized metric's mode (min | max), which `checkpoint.mode` and early stopping's
`mode` follow: the user's `optimized_mode`, else the sweep's `hydra.sweeper.direction` (the
first, in a multi-objective sweep), else min. litforge/train.yaml's default is
`${litforge.sweep_mode:min}`, so a lightning-hydra-template sweep config (`direction:
maximize`, no `optimized_mode`) keeps the best checkpoints by its own direction."""

from __future__ import annotations

import threading
from typing import Any

from omegaconf import DictConfig, OmegaConf

RESOLVER = "litforge.sweep_mode"
DEFAULT = "${" + RESOLVER + ":min}"  # litforge/train.yaml's optimized_mode
MODES = {"min": "min", "minimize": "min", "max": "max", "maximize": "max"}
# The monitors whose mode follows optimized_mode, with the key of what each watches.
MONITORS = {"checkpoint.mode": "checkpoint.monitor",
            "callbacks.early_stopping.mode": "callbacks.early_stopping.monitor"}  # fmt: skip
_resolving = threading.local()


def _sweeper(root: Any) -> DictConfig | None:
    """hydra.sweeper: in the full config while Hydra composes, else the job's HydraConfig."""
    node = OmegaConf.select(root, "hydra.sweeper", default=None) if "hydra" in root else None
    if node is None:
        from hydra.core.hydra_config import HydraConfig

        node = HydraConfig.get().sweeper if HydraConfig.initialized() else None
    return node if isinstance(node, DictConfig) else None


def sweep_direction(root: Any) -> str | None:
    """The mode (min | max) of the sweep's first direction; None without a sweep, or
    where the direction is the sweeper's default, `${optimized_mode}`."""
    sweeper = _sweeper(root)
    if sweeper is None or "direction" not in list(sweeper.keys()):
        return None
    raw = OmegaConf.to_container(sweeper, resolve=False).get("direction")  # type: ignore[union-attr]
    if isinstance(raw, str) and "optimized_mode" in raw:
        return None  # it follows optimized_mode: asking it back would loop
    if getattr(_resolving, "active", False):  # a direction interpolated from a monitor's mode
        return None
    _resolving.active = True
    try:
        given = sweeper.direction
    finally:
        _resolving.active = False
    first = given[0] if OmegaConf.is_list(given) and len(given) else given
    return MODES.get(str(first))  # an unknown direction is the sweeper's one line


def sweep_mode(fallback: str, *, _root_: Any) -> str:
    """`${litforge.sweep_mode:min}`: the sweep's direction as a mode, else `fallback`."""
    return sweep_direction(_root_) or fallback


def register() -> None:
    OmegaConf.register_new_resolver(RESOLVER, sweep_mode, replace=True)


def _raw(cfg: DictConfig, key: str) -> Any:
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    if not isinstance(node, DictConfig) or leaf not in list(node.keys()):
        return None
    return OmegaConf.to_container(node, resolve=False).get(leaf)  # type: ignore[union-attr]


def contradiction(cfg: DictConfig, direction: Any) -> str | None:
    """One line when a mode the user set (optimized_mode, or the mode of a monitor watching
    the optimized metric) ranks against the sweep's `direction`; None when all agree."""
    many = isinstance(direction, list | tuple) or OmegaConf.is_list(direction)
    first = (direction[0] if len(direction) else None) if many else direction
    wanted = MODES.get(str(first))
    if wanted is None:
        return None
    metrics = OmegaConf.select(cfg, "optimized_metric", default=None)
    metric = str(metrics[0] if OmegaConf.is_list(metrics) else metrics)
    against = []
    if _raw(cfg, "optimized_mode") not in (None, DEFAULT):
        against.append(("optimized_mode", OmegaConf.select(cfg, "optimized_mode")))
    for mode_key, monitor_key in MONITORS.items():
        raw = _raw(cfg, mode_key)
        if raw is None or raw == "${optimized_mode}":
            continue  # absent, or follows optimized_mode (checked above)
        if str(OmegaConf.select(cfg, monitor_key, default=None)) == metric:
            against.append((mode_key, OmegaConf.select(cfg, mode_key)))
    against = [(key, value) for key, value in against if MODES.get(str(value)) != wanted]
    if not against:
        return None
    keys = ", ".join(f"{key}={value}" for key, value in against)
    other = "lowest" if wanted == "max" else "highest"
    one = len(against) == 1
    return (
        f"hydra.sweeper.direction={first} for {metric}, but {keys} rank{'s' * one} the {other} "
        f"{metric} best; set {'it' if one else 'them'} to {wanted}, or leave "
        f"{'it' if one else 'them'} out to follow the direction"
    )
