"""Figures `overhead_cnn_numerics` and `numerics_hook_share`: what the numerics watch costs
the digits template (the default watch, policy stop: one flag read per optimizer step,
free on CPU).

overhead_cnn_numerics: the template with the watch over the same with
`callbacks.numerics=null`, CPU time per step (the slope between a short and a long run,
sides interleaved); everything else, the logger and checkpoints included, is the template's.
numerics_hook_share: CPU time inside the watch's hooks over the CPU time of the run, per
step (the same slopes), accounted inside each run: steadier than the A/B ratio, but blind to
Lightning's cost of calling the hooks.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.overhead import template_runner
from benchmarks.stats import MIN_REPEATS, Figure, cpu_seconds, interleaved, per_step, ratios
from litforge.monitors.numerics.callback import NumericsWatch

BASE = ["experiment=digits_cnn"]
TIMED = "callbacks.numerics._target_=benchmarks.numerics_overhead.TimedWatch"
SIDES = {"watch": BASE, "none": [*BASE, "callbacks.numerics=null"]}


def _timed(hook: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: NumericsWatch, *args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return hook(self, *args, **kwargs)
        finally:
            TimedWatch.spent += time.thread_time() - start

    return run


class TimedWatch(NumericsWatch):
    """The watch, adding up the CPU time spent in its per-step hooks."""

    spent = 0.0
    on_train_batch_start = _timed(NumericsWatch.on_train_batch_start)
    on_before_backward = _timed(NumericsWatch.on_before_backward)
    on_before_optimizer_step = _timed(NumericsWatch.on_before_optimizer_step)
    on_train_batch_end = _timed(NumericsWatch.on_train_batch_end)


def _hook_share(run: Callable[[int], Any], short: int, long: int) -> float:
    """(hook seconds long - short) / (run seconds long - short)."""
    spent, cpu = [], []
    for steps in (short, long):
        TimedWatch.spent = 0.0
        cpu.append(cpu_seconds(lambda steps=steps: run(steps)))
        spent.append(TimedWatch.spent)
    return (spent[1] - spent[0]) / (cpu[1] - cpu[0])


def measure(repeats: int = MIN_REPEATS) -> dict[str, Figure]:
    short, long = 2 * 19, 8 * 19  # whole epochs: both carry the per-epoch work in proportion
    dirs: list[Path] = []
    runs = {name: template_runner(overrides, dirs) for name, overrides in SIDES.items()}
    timed = template_runner([*BASE, TIMED], dirs)
    for run in (*runs.values(), timed):
        run(short)  # warm-up: imports and first-call costs stay out
    sides: dict[str, Any] = {
        name: (lambda run=run: per_step(run, short, long)) for name, run in runs.items()
    }
    values = interleaved(sides, repeats)
    shares = [_hook_share(timed, short, long) for _ in range(3)]
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    ms = {name: round(statistics.median(v) * 1e3, 4) for name, v in values.items()}
    return {
        "overhead_cnn_numerics": Figure.of(
            ratios(values, "watch", "none"),
            "x callbacks.numerics=null",
            "<= 1.01",
            note="digits template with the numerics watch / without, CPU time per step",
            extra={"ms_per_step_median": ms, "steps": [short, long]},
        ),
        "numerics_hook_share": Figure.of(
            shares,
            "of step CPU time",
            note="digits template: CPU time inside the numerics watch's hooks / CPU time per "
            "step, accounted inside each run (3 repeats)",
        ),
    }
