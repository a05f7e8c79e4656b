"""Time and money: a plan's wall time and cost on demand and on spot, and the checkpoint
interval that minimises the expected spot time.

On spot a run loses, per preemption, the work since its last checkpoint (half an interval
on average) plus the restart; each checkpoint costs its save time. Young (1974) and Daly
(2006) give the interval that minimises the sum, to first order: sqrt(2 x save time x
MTBF); the expected wall time is then T + (T / interval) x save + (T / MTBF) x (interval / 2
+ restart).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from litforge.errors import ConfigError

# Without a run to read them from: a save at 1 GB/s plus 2 s, a restart of 2 minutes
# (a new machine's start-up, the image, the resume). Stated as estimates in the output.
SAVE_BYTES_PER_S = 1e9
SAVE_FIXED_S = 2.0
RESTART_S = 120.0


@dataclass(frozen=True)
class Restarts:
    """What a checkpoint and a restart cost, and where the figures come from."""

    save_s: float | None  # None: estimated from the checkpoint's size
    restart_s: float
    source: str


@dataclass(frozen=True)
class Spot:
    interval_s: float
    every_n_train_steps: int
    wall_s: float


def estimated() -> Restarts:
    return Restarts(
        None, RESTART_S, f"estimates: save at {SAVE_BYTES_PER_S / 1e9:g} GB/s + "
        f"{SAVE_FIXED_S:g} s, restart {RESTART_S:g} s (--from-run DIR measures them)"
    )  # fmt: skip


def from_run(run_dir: str | Path) -> Restarts:
    """The save time and restart cost a run measured (its run.json)."""
    path = Path(run_dir) / "run.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as err:
        raise ConfigError(f"--from-run {run_dir}: no readable run.json ({err})") from None
    if not isinstance(record, dict):
        raise ConfigError(f"--from-run {run_dir}: {path} is not a JSON object")
    save, restart = record.get("checkpoint_save_s"), record.get("restart_s")
    if restart is not None and not _seconds(restart):
        raise ConfigError(f"--from-run {run_dir}: {path} has restart_s={restart!r}; it must "
                          "be a number of seconds >= 0")  # fmt: skip
    if restart is None:
        raise ConfigError(
            f"--from-run {run_dir}: run.json has no restart_s; it is written when a run "
            "reaches its first training step"
        )
    if not _seconds(save):
        save = None
    # Training is back at full speed once its first step is done: the compile on the first
    # step is part of what a preemption costs.
    phases = record.get("restart_phases_s")
    compiling = phases.get("compile", 0.0) if isinstance(phases, dict) else 0.0
    if not _seconds(compiling):
        raise ConfigError(f"--from-run {run_dir}: {path} has restart_phases_s.compile="
                          f"{compiling!r}; it must be a number of seconds >= 0")  # fmt: skip
    what = "save and restart" if save is not None else "restart (no save yet: save estimated)"
    return Restarts(save, float(restart) + float(compiling), f"measured {what} in {path}")


def _seconds(value: Any) -> bool:
    """Whether a run.json figure is a usable duration (a damaged file may hold anything)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and 0 <= value < 1e12 and math.isfinite(value)


def save_seconds(restarts: Restarts, checkpoint_bytes: int) -> float:
    if restarts.save_s is not None:
        return restarts.save_s
    return checkpoint_bytes / SAVE_BYTES_PER_S + SAVE_FIXED_S


def spot(total_s: float, step_s: float, save_s: float, restart_s: float, mtbf_s: float) -> Spot:
    """The Young/Daly interval, as optimizer steps (at most the run's: a run shorter than
    the interval saves only at its end), and the expected wall time on spot: the run, its
    saves, and per expected preemption half an interval of lost work plus the restart."""
    interval = min(math.sqrt(2 * save_s * mtbf_s), total_s)
    steps = max(1, round(interval / step_s)) if step_s > 0 else 1
    interval = max(steps * step_s, 1e-9) if step_s > 0 else interval
    saves = max(1.0, total_s / interval)
    wall = total_s + saves * save_s + total_s / mtbf_s * (interval / 2 + restart_s)
    return Spot(interval, steps, wall)
