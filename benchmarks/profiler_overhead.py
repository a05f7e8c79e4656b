"""Figures `overhead_cnn_step_breakdown` and `step_breakdown_hook_share`: what the step
breakdown costs a step outside its
profiled window: the digits template with `callbacks=[default,step_breakdown]` over the
same without it, CPU time per step (the slope between a short and a long run, sides
interleaved). Both runs of a side hold the whole window (wait 0, warm-up 1, 5 recorded;
the trace written and read back), so the window's fixed cost drops out of the slope and
what remains is the per-step cost after it: the callback's hook. That A/B ratio spreads
about +-15% here, wider than the effect, so `step_breakdown_hook_share` accounts the same
cost inside the run: CPU time in the callback's per-step hook after the window over the
process's CPU time of those steps (blind to Lightning's cost of calling a hook, as
benchmarks/hook_costs.py is). Beside them, for
orientation, `step_breakdown_window_x`: the window's mean step over the other steps' mean,
wall time, in the same runs (the profiler's cost while it records), and the trace's size.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import lightning as L

from benchmarks.overhead import template_runner
from benchmarks.stats import MIN_REPEATS, Figure, interleaved, per_step, ratios
from litforge.monitors.step_breakdown import StepBreakdown

# Both sides carry the step clock: the sides differ by the breakdown alone.
BASE = ["experiment=digits_cnn", f"+callbacks.wall._target_={__name__}.StepWalls"]
WINDOW = ["callbacks=[default,step_breakdown]", "callbacks.step_breakdown.wait_steps=0"]
SIDES = {"breakdown": [*BASE, *WINDOW], "none": BASE}
TIMED = f"callbacks.step_breakdown._target_={__name__}.TimedBreakdown"


class TimedBreakdown(StepBreakdown):
    """The breakdown, adding up the CPU time of its per-step hook once its window is over."""

    spent = 0.0
    cpu_start: float | None = None
    shares: list[float] = []

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        after = self._done and self._profiler is None
        if after and TimedBreakdown.cpu_start is None:
            TimedBreakdown.spent, TimedBreakdown.cpu_start = 0.0, time.process_time()
        start = time.thread_time()
        super().on_train_batch_start(trainer, *args)
        if after:
            TimedBreakdown.spent += time.thread_time() - start

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if TimedBreakdown.cpu_start is not None:
            cpu = time.process_time() - TimedBreakdown.cpu_start
            TimedBreakdown.shares.append(TimedBreakdown.spent / cpu)
            TimedBreakdown.cpu_start = None
        super().on_train_end(trainer, pl_module)


class StepWalls(L.Callback):
    """Wall seconds between consecutive training batch starts of the latest run."""

    starts: list[float] = []

    def on_fit_start(self, *args: Any) -> None:
        StepWalls.starts = []

    def on_train_batch_start(self, *args: Any) -> None:
        StepWalls.starts.append(time.perf_counter())


def _window_ratio(dirs: list[Path]) -> tuple[float, float]:
    """(window's mean step / the later steps' median, trace MB) of the latest side's run."""
    record = json.loads((dirs[-1] / "run.json").read_text())["step_breakdown"]
    steps = [b - a for a, b in zip(StepWalls.starts, StepWalls.starts[1:], strict=False)]
    after = steps[record["steps"] + 2 :]  # past the warm-up, the window and the read-back
    size = Path(record["trace"]).stat().st_size / 1e6
    return record["step_s"] / statistics.median(after), size


def measure(repeats: int = MIN_REPEATS) -> dict[str, Figure]:
    short, long = 2 * 19, 8 * 19  # whole epochs, each well past the 6-step window
    dirs: list[Path] = []
    runs = {name: template_runner(overrides, dirs) for name, overrides in SIDES.items()}
    for run in runs.values():
        run(short)  # warm-up: imports and first-call costs stay out
    window: list[tuple[float, float]] = []

    def breakdown_side() -> float:
        slope = per_step(runs["breakdown"], short, long)
        window.append(_window_ratio(dirs))
        return slope

    values = interleaved(
        {"breakdown": breakdown_side, "none": lambda: per_step(runs["none"], short, long)},
        repeats,
    )
    timed = template_runner([*BASE, *WINDOW, TIMED], dirs)
    TimedBreakdown.shares = []
    for _ in range(3):
        timed(long)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    ms = {name: round(statistics.median(v) * 1e3, 3) for name, v in values.items()}
    return {
        "overhead_cnn_step_breakdown": Figure.of(
            ratios(values, "breakdown", "none"),
            "x without",
            "<= 1.03",
            note="digits template, callbacks=[default,step_breakdown] / default, CPU time per "
            "step outside the profiled window (the window's fixed cost cancels in the slope); "
            f"CPU ms per step: {ms}",
            extra={"cpu_ms_per_step": ms},
        ),
        "step_breakdown_hook_share": Figure.of(
            TimedBreakdown.shares,
            "of step CPU",
            "<= 0.03",
            note="digits template: CPU time in the breakdown's per-step hook after its window "
            "over the process's CPU time of those steps, accounted inside the run",
        ),
        "step_breakdown_window_x": Figure.of(
            [w for w, _ in window],
            "x a step",
            note="wall time of a profiled step over an unprofiled one in the same run (the "
            f"profiler while it records); trace {statistics.median(s for _, s in window):.1f} MB "
            "for 5 steps",
        ),
    }
