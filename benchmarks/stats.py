"""Paired-ratio statistics: the one way every timed figure in `benchmarks/` is measured.

Shared machines are noisy, so no figure is an absolute time. Each figure is a ratio of
two (or more) sides measured in the same process, one repeat of every side after the
other (A B C, then C B A, ...), so that slow spells of the machine hit all sides alike.
Time is CPU time of this process (`time.process_time`) with torch on one thread, which
other processes on the machine do not inflate. A side's per-step cost is the slope
between a short and a long run, so start-up (building objects, the first iteration)
drops out. The figure is the median of the per-repeat ratios; min and max show spread.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

MIN_REPEATS = 7


@dataclass
class Figure:
    """One row of results/latest.json: a value (or spread of values) and its goal."""

    median: float
    min: float
    max: float
    unit: str
    goal: str | None = None  # e.g. "<= 1.05"; None where the figure is only reported
    n: int = 1  # paired repeats behind the value (1 for deterministic counts)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, values: Sequence[float], unit: str, goal: str | None = None, **kw: Any):
        return cls(
            statistics.median(values), min(values), max(values), unit, goal, len(values), **kw
        )

    @property
    def met(self) -> bool | None:
        """Whether the median meets the goal; None when there is no goal."""
        if not self.goal:
            return None
        op, bound = self.goal.split()
        return self.median <= float(bound) if op == "<=" else self.median >= float(bound)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["met"] = self.met
        return out


def cpu_seconds(fn: Callable[[], Any]) -> float:
    """CPU time of this process spent in fn(), after a full garbage collection."""
    gc.collect()
    start = time.process_time()
    fn()
    return time.process_time() - start


def per_step(run: Callable[[int], Any], short: int, long: int) -> float:
    """CPU seconds per step: (t(long) - t(short)) / (long - short); start-up cancels."""
    return (cpu_seconds(lambda: run(long)) - cpu_seconds(lambda: run(short))) / (long - short)


def interleaved(
    sides: dict[str, Callable[[], float]], repeats: int = MIN_REPEATS
) -> dict[str, list[float]]:
    """Call every side once per repeat, alternating the order (A B C, C B A, ...).

    Each side returns one measurement (e.g. `per_step(...)`); returns name -> values.
    """
    names = list(sides)
    values: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            values[name].append(sides[name]())
    return values


def ratios(values: dict[str, list[float]], num: str, den: str) -> list[float]:
    """Per-repeat ratios num/den of two sides measured by `interleaved`."""
    return [a / b for a, b in zip(values[num], values[den], strict=True)]


def show(name: str, fig: Figure) -> None:
    """One console line per figure: min/median/max and the goal."""
    goal = f"  goal {fig.goal}: {'met' if fig.met else 'MISSED'}" if fig.goal else ""
    spread = f" (min {fig.min:.4g}, max {fig.max:.4g}, n={fig.n})" if fig.n > 1 else ""
    print(f"  {name:<28} {fig.median:.4g} {fig.unit}{spread}{goal}", flush=True)
