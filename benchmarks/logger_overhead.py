"""Figure `overhead_cnn_wandb`: the digits template with `logger=wandb` (offline) over
`logger=csv`, CPU time per step (the slope between a short and a long run, interleaved);
and the start-up each logger adds, in wall seconds.

CPU time is this process's: W&B's own `wandb-core` process, which writes the run files,
is not counted, as it does not slow the training loop. The start-up figures are wall time
of a 1-step run (no test) minus the same with `logger=csv`, medians of 2.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import scratch_dir
from benchmarks.overhead import template_runner
from benchmarks.stats import MIN_REPEATS, Figure, interleaved, per_step, ratios
from litforge.cli import compose
from litforge.training import train

BASE = ["experiment=digits_cnn"]
LOGGERS = {
    "csv": ["logger=csv"],
    "tensorboard": ["logger=tensorboard"],
    "wandb": ["logger=wandb", "logger.wandb.mode=offline"],
    "mlflow": ["logger=mlflow"],
}


def _one_step_wall(overrides: list[str]) -> float:
    run_dir = scratch_dir()
    start = time.perf_counter()
    train(compose([*BASE, *overrides, "trainer.max_steps=1", "test=false"], run_dir))
    wall = time.perf_counter() - start
    shutil.rmtree(run_dir, ignore_errors=True)
    return wall


def measure(repeats: int = MIN_REPEATS) -> dict[str, Figure]:
    short, long = 2 * 19, 8 * 19
    dirs: list[Path] = []
    runs = {name: template_runner([*BASE, *LOGGERS[name]], dirs) for name in ("csv", "wandb")}
    for run in runs.values():
        run(short)  # warm-up: imports, the first W&B start
    sides: dict[str, Any] = {
        name: (lambda run=run: per_step(run, short, long)) for name, run in runs.items()
    }
    values = interleaved(sides, repeats)
    startup: dict[str, list[float]] = {name: [] for name in LOGGERS}
    for _ in range(2):  # one-off wall seconds, for orientation
        for name, overrides in LOGGERS.items():
            startup[name].append(_one_step_wall(overrides))
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    base = statistics.median(startup["csv"])
    added = {
        name: round(statistics.median(v) - base, 2) for name, v in startup.items() if name != "csv"
    }
    return {
        "overhead_cnn_wandb": Figure.of(
            ratios(values, "wandb", "csv"),
            "x logger=csv",
            "<= 1.02",
            note="digits template, logger=wandb (offline) / logger=csv, CPU time per step",
        ),  # fmt: skip
        "logger_startup_s": Figure.of(
            [max(added.values())],
            "s",
            note=f"wall seconds each logger adds to a run's start: {added}",
            extra=added,
        ),  # fmt: skip
    }
