"""Figure 6, start-up: process start to the first optimizer step of `python train.py`.

Compared with `python -c "import lightning"`, the floor any Lightning program pays. Both
are fresh processes (CI=1, one thread), interleaved; the time of a child is its CPU time
(user + system, from `resource.getrusage(RUSAGE_CHILDREN)`), so other load on the machine
does not count. Training is the default experiment; a callback added on the command line
(`+callbacks.first_step._target_=...`, no config file changes) ends the process right
after the first optimizer step.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import lightning as L

from benchmarks.harness import ROOT
from benchmarks.stats import MIN_REPEATS, Figure, interleaved, ratios


class ExitAfterFirstStep(L.Callback):
    """Ends the process (status 0, no clean-up) once the first optimizer step is done."""

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step >= 1:
            os._exit(0)


def _child_cpu_seconds(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child process run to completion."""
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def measure(repeats: int = MIN_REPEATS) -> dict[str, Figure]:
    run_dir = tempfile.mkdtemp(prefix="litforge-bench-startup-")
    train = [
        sys.executable, "train.py",
        f"+callbacks.first_step._target_={__name__}.ExitAfterFirstStep",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    bare = [sys.executable, "-c", "import lightning"]
    torch_only = [sys.executable, "-c", "import torch"]  # how much of the floor is torch
    walls: dict[str, list[float]] = {"train": [], "import": [], "torch": []}

    def side(name: str, argv: list[str]) -> float:
        cpu, wall = _child_cpu_seconds(argv)
        walls[name].append(wall)
        return cpu

    _child_cpu_seconds(train)  # warm the file cache once
    sides = {
        "train": lambda: side("train", train),
        "import": lambda: side("import", bare),
        "torch": lambda: side("torch", torch_only),
    }
    values = interleaved(sides, repeats)
    med = {k: statistics.median(v) for k, v in values.items()}
    return {
        "startup": Figure.of(
            ratios(values, "train", "import"),
            "x import lightning",
            note="train.py start to first optimizer step / `python -c 'import lightning'`, CPU time",
            extra={
                "cpu_s_median": {k: round(v, 3) for k, v in med.items()},
                "wall_s_median": {k: round(statistics.median(v), 3) for k, v in walls.items()},
            },
        )
    }
