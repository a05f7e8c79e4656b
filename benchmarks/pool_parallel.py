"""Figure `pool_parallel`: 4 digits trials under `hydra/launcher=gpus` with 2 at once
(hydra.launcher.devices=[0,1] on CPU: each trial a process with one of the 2 cores) over
the same 4 one after another (devices=[0]: each with both cores), wall time.

Each sweep is a fresh `python train.py -m` process with Hydra's basic sweeper over 4
learning rates; the two sides alternate (A B B A), and the figure is the ratio of their
medians. Wall time, unlike the other figures: what is measured is the machine kept busy.
`pool_parallel_trials` leaves out the sweep process's own start (~10 s here, most of it
importing lightning for the config checks of every job) and its report.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks.harness import ROOT, scratch_dir
from benchmarks.stats import Figure

RATES = "model.optimizer.lr=0.001,0.002,0.003,0.004"


STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def _span(output: str) -> float:
    """Seconds from the first trial's start to the last trial's end, off the sweep's lines."""
    times = [
        datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for line in output.splitlines()
        if ("started on device" in line or "finished:" in line) and (m := STAMP.match(line))
    ]
    return max(times) - min(times)


def one_sweep(devices: str) -> tuple[float, float]:
    """Wall seconds of the 4-trial sweep on `devices`, and of its trials' span."""
    sweep_dir = scratch_dir() / "sweep"
    env = {**os.environ, "CI": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("OMP_NUM_THREADS", None)  # the launcher gives each trial its share of the cores
    argv = [
        sys.executable, "train.py", "-m", RATES, "hydra/launcher=gpus",
        f"hydra.launcher.devices={devices}", "hydra.launcher.stagger_s=0", "test=false",
        f"hydra.sweep.dir={sweep_dir}",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    shutil.rmtree(sweep_dir.parent, ignore_errors=True)
    return wall, _span(done.stdout + done.stderr)


def measure(repeats: int = 2) -> dict[str, Figure]:
    walls: dict[str, list[float]] = {"[0,1]": [], "[0]": []}
    spans: dict[str, list[float]] = {"[0,1]": [], "[0]": []}
    for r in range(repeats):
        for devices in ("[0,1]", "[0]") if r % 2 == 0 else ("[0]", "[0,1]"):
            wall, span = one_sweep(devices)
            walls[devices].append(wall)
            spans[devices].append(span)
    together, alone = statistics.median(walls["[0,1]"]), statistics.median(walls["[0]"])
    ratio = together / alone
    trials = statistics.median(spans["[0,1]"]) / statistics.median(spans["[0]"])
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
            extra={"trials_span_ratio": round(trials, 3), "walls_s": walls, "spans_s": spans},
        ),  # fmt: skip
        "pool_parallel_trials": Figure(
            trials,
            trials,
            trials,
            "x one at a time",
            None,
            repeats,
            note="the same, from the first trial's start to the last one's end (the sweep "
            "process's own start-up and report left out)",
        ),  # fmt: skip
    }
