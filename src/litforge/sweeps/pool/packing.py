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
    planner = Planner(per_device, margin, ids, cards)
    return planner.capacity(configs), [planner.cost(c) for c in configs]


class Planner:
    """Capacity and costs for jobs that come one by one (trial by trial): the capacity is
    set by the first jobs given, each budget is measured once."""

    def __init__(self, per_device: Any, margin: float, ids: list[int], cards: Cards) -> None:
        self.per_device, self.margin, self.ids, self.cards = per_device, margin, ids, cards
        self.needs: dict[str, int | None] = {}
        self.by_bytes: bool | None = None  # decided by the first jobs

    def capacity(self, configs: Sequence[DictConfig]) -> dict[int, float]:
        """Per device: one slot each, or the bytes free less the margin (per_device=auto,
        when the budget of each of `configs` is known)."""
        self.by_bytes = False
        if self.per_device == 1:
            return dict.fromkeys(self.ids, 1.0)
        if not self.cards.free:
            log.info("hydra.launcher.per_device=auto: no GPU, so one trial per device")
            return dict.fromkeys(self.ids, 1.0)
        needs = [self._need(cfg) for cfg in configs]
        if any(n is None for n in needs):
            return dict.fromkeys(self.ids, 1.0)  # _need said why
        usable = {i: self.cards.free[i] * (1 - self.margin) for i in self.ids}
        for need in sorted({int(n or 0) for n in needs}):
            self._say_fit(need, usable)
        self.by_bytes = True
        return usable

    def cost(self, config: DictConfig) -> float:
        """What one job takes of each of its devices: a slot, or its budget in bytes (a
        whole card where a later job's budget cannot be measured)."""
        if not self.by_bytes:
            return 1.0
        known = len(self.needs)
        need = self._need(config)
        usable = {i: self.cards.free[i] * (1 - self.margin) for i in self.ids}
        if need is None:
            return min(usable.values())
        if len(self.needs) > known:  # a budget not seen before: say how many fit
            self._say_fit(need, usable)
        return float(need)

    def _need(self, cfg: DictConfig) -> int | None:
        key = _budget_key(cfg)
        if key not in self.needs:
            self.needs[key] = _need(cfg)
        return self.needs[key]

    def _say_fit(self, need: int, usable: dict[int, float]) -> None:
        per_card = int(min(usable.values()) // need)
        if per_card < 1:
            raise ConfigError(
                f"hydra.launcher.per_device=auto: a trial needs ~{need / GIB:.1f} GiB by the "
                f"memory budget, more than a card's {min(usable.values()) / GIB:.1f} GiB free "
                f"less the {self.margin:.0%} margin; see python -m litforge.budget"
            )
        log.info(
            "hydra.launcher.per_device=auto: %d trial(s) per card: each needs ~%.2f GiB (the "
            "memory budget plus ~%.1f GiB of CUDA context), and a card has %.1f GiB free "
            "less the %.0f%% margin",
            per_card, need / GIB, CONTEXT_BYTES / GIB, min(usable.values()) / GIB,
            self.margin * 100,
        )  # fmt: skip


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
