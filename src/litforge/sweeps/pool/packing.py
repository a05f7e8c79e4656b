"""hydra.launcher.per_device: 1 (a card per trial), or auto: as many trials per card as the
memory budget (`python -m litforge.budget`) says fit, with a margin."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from litforge.errors import ConfigError
from litforge.sweeps.pool.devices import Cards

log = logging.getLogger("litforge")

GIB = 1024**3
# Memory a trial process holds beyond what the budget counts: the CUDA context and the
# caching allocator's slack. An assumption (typical for torch 2 on CUDA 12 with lazy
# module loading), not a measurement: the margin covers what it misses.
CONTEXT_BYTES = GIB // 2


def plan(
    per_device: Any, margin: float, configs: Sequence[DictConfig], ids: list[int], cards: Cards
) -> tuple[dict[int, float], list[float]]:
    """(capacity per device, cost per job) for `Capacity`."""
    ones = [1.0] * len(configs)
    if per_device == 1:
        return dict.fromkeys(ids, 1.0), ones
    if not cards.free:
        log.info("hydra.launcher.per_device=auto: no GPU, so one trial per device")
        return dict.fromkeys(ids, 1.0), ones
    needs: dict[str, int | None] = {}
    costs: list[float] = []
    for cfg in configs:
        key = _budget_key(cfg)
        if key not in needs:
            needs[key] = _need(cfg)
        costs.append(float(needs[key] or 0))
    if any(needs[_budget_key(c)] is None for c in configs):
        return dict.fromkeys(ids, 1.0), ones  # _need said why
    usable = {i: cards.free[i] * (1 - margin) for i in ids}
    for need in sorted({int(c) for c in costs}):
        per_card = int(min(usable.values()) // need)
        if per_card < 1:
            raise ConfigError(
                f"hydra.launcher.per_device=auto: a trial needs ~{need / GIB:.1f} GiB by the "
                f"memory budget, more than a card's {min(usable.values()) / GIB:.1f} GiB free "
                f"less the {margin:.0%} margin; see python -m litforge.budget"
            )
        log.info(
            "hydra.launcher.per_device=auto: %d trial(s) per card: each needs ~%.2f GiB (the "
            "memory budget plus ~%.1f GiB of CUDA context), and a card has %.1f GiB free "
            "less the %.0f%% margin",
            per_card, need / GIB, CONTEXT_BYTES / GIB, min(usable.values()) / GIB, margin * 100,
        )  # fmt: skip
    return usable, costs


def _budget_key(cfg: DictConfig) -> str:
    keys = ("model", "data", "trainer.precision", "trainer.accumulate_grad_batches")
    return repr([OmegaConf.select(cfg, k, default=None) for k in keys])


def _need(cfg: DictConfig) -> int | None:
    """Peak bytes of one trial by the memory budget, or None (and why) when it cannot say.

    Measured by `python -m litforge.budget --json` in a process of its own (on the first
    visible card): the sweep process itself holds no CUDA memory."""
    if OmegaConf.select(cfg, "model._target_", default=None) is None:
        log.info("hydra.launcher.per_device=auto: no litforge model config, so one trial per card")
        return None
    env = dict(os.environ)
    for source in cfg.hydra.runtime.get("config_sources", []):
        if source.get("provider") == "main" and str(source.path).startswith("file://"):
            env["LITFORGE_CONF"] = str(source.path)[len("file://") :]
    command = [sys.executable, "-m", "litforge.budget", "--json", *cfg.hydra.overrides.task]
    done = None
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        return int(row["total"]) + CONTEXT_BYTES
    except (subprocess.SubprocessError, OSError, ValueError, IndexError, KeyError) as err:
        said = done.stderr.strip().splitlines() if done is not None else []
        log.warning(
            "hydra.launcher.per_device=auto: the memory budget could not measure the trial "
            "(%s), so one trial per card", said[-1] if said else repr(err),
        )  # fmt: skip
        return None
