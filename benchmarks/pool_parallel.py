"""Figure `pool_parallel`: 4 digits trials under `hydra/launcher=gpus` with 2 at once
(hydra.launcher.devices=[0,1] on CPU: each trial a process with one of the 2 cores) over
the same 4 one after another (devices=[0]: each with both cores), wall time.

Each sweep is a fresh `python train.py -m` process with Hydra's basic sweeper over 4
learning rates; the two sides alternate (A B B A), and the figure is the ratio of their
medians. Wall time, unlike the other figures: what is measured is the machine kept busy.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks.harness import ROOT, scratch_dir
from benchmarks.stats import Figure

RATES = "model.optimizer.lr=0.001,0.002,0.003,0.004"


def one_sweep(devices: str) -> float:
    """Wall seconds of the 4-trial sweep on `devices`."""
    sweep_dir = scratch_dir() / "sweep"
    env = {**os.environ, "CI": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("OMP_NUM_THREADS", None)  # the launcher gives each trial its share of the cores
    argv = [
        sys.executable, "train.py", "-m", RATES, "hydra/launcher=gpus",
        f"hydra.launcher.devices={devices}", "hydra.launcher.stagger_s=0", "test=false",
        f"hydra.sweep.dir={sweep_dir}",
    ]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    shutil.rmtree(sweep_dir.parent, ignore_errors=True)
    return wall


def measure(repeats: int = 2) -> dict[str, Figure]:
    walls: dict[str, list[float]] = {"[0,1]": [], "[0]": []}
    for r in range(repeats):
        for devices in ("[0,1]", "[0]") if r % 2 == 0 else ("[0]", "[0,1]"):
            walls[devices].append(one_sweep(devices))
    together, alone = statistics.median(walls["[0,1]"]), statistics.median(walls["[0]"])
    ratio = together / alone
    return {
        "pool_parallel": Figure(
            ratio,
            min(a / b for a in walls["[0,1]"] for b in walls["[0]"]),
            max(a / b for a in walls["[0,1]"] for b in walls["[0]"]),
            "x one at a time",
            "<= 0.6",
            repeats,
            note=f"4 digits trials, hydra/launcher=gpus, 2 at once / 1 at a time on 2 CPU "
            f"cores, wall time: {together:.1f} s / {alone:.1f} s",
        )  # fmt: skip
    }
