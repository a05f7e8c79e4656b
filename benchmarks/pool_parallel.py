"""Group `pool`: `hydra/launcher=gpus` keeping its devices busy.

`pool_busy_trials`, `pool_busy_batches`, `pool_trials_over_batches`: 12 trials of the plain
sleeping app (tests/sweeps/pool_app, no training) lasting 1x to 4x on 4 devices of a CPU
device list, under litforge's Optuna sweeper trial by trial (each trial asked and started as
a device frees) and in batches of 4 (hydra.sweeper.schedule=batches: Hydra's protocol), the
same lengths in the same trial order for both, side by side in one run (the two schedules
take turns per order). Busy fraction: the devices' time with a trial process on them (the
sweep's own start and end lines for each trial, so a trial's start-up counts as busy) over
4 x the span from the first start to the last end. The tail, where the last trials run and
nothing is left to start, is idle by nature: `ideal_*` in the extras are the figures of the
same orders with no overhead at all.

Figure `pool_parallel`: 4 digits trials under `hydra/launcher=gpus` with 2 at once
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
import heapq
import os
import random
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


APP = ROOT / "tests" / "sweeps" / "pool_app" / "app.py"
UNIT_S = 1.5  # one length unit: trials last 1.5 to 6 s (plus their process's start-up)
SLOTS = 4
TRIAL_LINE = re.compile(r"trial job #(\d+) (started on device\(s\) \[([\d, ]+)\]|finished:)")


def orders(count: int) -> list[list[int]]:
    """`count` orders of 12 trials: three groups of the lengths 1, 2, 3, 4, each group
    shuffled (seeds 0, 1, ...), so that each batch of 4 holds one trial of every length."""
    shuffled = []
    for seed in range(count):
        draw, lengths = random.Random(seed), []
        for _ in range(3):
            group = [1, 2, 3, 4]
            draw.shuffle(group)
            lengths += group
        shuffled.append(lengths)
    return shuffled


def ideal(lengths: list[int]) -> tuple[float, float]:
    """Spans of `lengths` in trial order on SLOTS devices with no overhead: trial by trial
    (each on the first device to free), in batches of SLOTS (each as long as its longest)."""
    free = [0.0] * SLOTS
    for length in lengths:
        heapq.heappush(free, heapq.heappop(free) + length)
    batches = sum(max(lengths[i : i + SLOTS]) for i in range(0, len(lengths), SLOTS))
    return max(free), float(batches)


def busy_and_span(output: str) -> tuple[float, float, float]:
    """Off the sweep's lines: the devices' busy fraction over the trials' span, the same up
    to the last trial's start (while trials were left to start), and the span."""
    started: dict[int, tuple[float, int]] = {}
    runs: list[tuple[float, float, int]] = []
    first, last = float("inf"), -float("inf")
    for line in output.splitlines():
        stamp, trial = STAMP.match(line), TRIAL_LINE.search(line)
        if not stamp or not trial:
            continue
        at = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        number = int(trial.group(1))
        if trial.group(3) is not None:
            started[number] = (at, len(trial.group(3).split(",")))
            first = min(first, at)
        else:
            begun, devices = started.pop(number)
            runs.append((begun, at, devices))
            last = max(last, at)
    assert not started, f"trials that never ended: {sorted(started)}"
    last_start = max(begun for begun, _, _ in runs)

    def busy_until(until: float) -> float:
        held = sum((min(end, until) - begun) * d for begun, end, d in runs if begun < until)
        return held / (SLOTS * (until - first))

    return busy_until(last), busy_until(last_start), last - first


def one_schedule(schedule: str, lengths: list[int]) -> tuple[float, float, float, float]:
    """Wall seconds of the 12-trial sweep under `schedule`, and `busy_and_span`'s figures."""
    sweep_dir = scratch_dir() / "sweep"
    argv = [
        sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep_dir}",
        f"hydra.launcher.lease_dir={sweep_dir}/.leases", "hydra.launcher.devices=[0,1,2,3]",
        "hydra/sweeper=litforge_optuna", "hydra.sweeper.pruner=none",
        f"++hydra.sweeper.schedule={schedule}", f"hydra.sweeper.n_trials={len(lengths)}",
        f"hydra.sweeper.n_jobs={SLOTS}", "hydra.sweeper.sampler=random", "hydra.sweeper.seed=0",
        "x=interval(0, 1)", f"lengths=[{','.join(str(k * UNIT_S) for k in lengths)}]",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    shutil.rmtree(sweep_dir.parent, ignore_errors=True)
    return (wall, *busy_and_span(done.stdout + done.stderr))


def measure_schedules(count: int = 3) -> dict[str, Figure]:
    """Trial by trial against batches, on the same `count` orders of the 12 lengths."""
    seen: dict[str, dict[str, list[float]]] = {
        s: {"wall": [], "busy": [], "filling": [], "span": []} for s in ("trials", "batches")
    }
    ideals = []
    for i, lengths in enumerate(orders(count)):
        ideals.append(ideal(lengths))
        for schedule in ("trials", "batches") if i % 2 == 0 else ("batches", "trials"):
            figures = one_schedule(schedule, lengths)
            for name, value in zip(seen[schedule], figures, strict=True):
                seen[schedule][name].append(value)
    trials, batches = seen["trials"], seen["batches"]
    walls = [a / b for a, b in zip(trials["wall"], batches["wall"], strict=True)]
    spans = [a / b for a, b in zip(trials["span"], batches["span"], strict=True)]
    work = sum(orders(1)[0])  # 30 units on every order
    extra = {
        "orders": orders(count), "unit_s": UNIT_S, "walls_s": {k: v["wall"] for k, v in seen.items()},
        "spans_s": {k: v["span"] for k, v in seen.items()},
        "busy_while_trials_left": {k: v["filling"] for k, v in seen.items()},
        "span_ratio": round(statistics.median(spans), 3),
        "ideal_busy_trials": [round(work / (SLOTS * t), 3) for t, _ in ideals],
        "ideal_busy_batches": [round(work / (SLOTS * b), 3) for _, b in ideals],
        "ideal_span_ratio": [round(t / b, 3) for t, b in ideals],
    }  # fmt: skip
    where = f"12 sleeping trials of {UNIT_S:g} to {4 * UNIT_S:g} s, 4 CPU device slots"
    return {
        "pool_busy_trials": Figure.of(
            trials["busy"], "busy share", ">= 0.9", note=f"trial by trial: {where}", extra=extra
        ),
        "pool_busy_trials_while_left": Figure.of(
            trials["filling"],
            "busy share",
            ">= 0.9",
            note="the same up to the last trial's start (batches: "
            f"{statistics.median(batches['filling']):.3f}): idle devices while trials wait",
        ),  # fmt: skip
        "pool_busy_batches": Figure.of(
            batches["busy"], "busy share", None, note=f"batches of 4 (Hydra's protocol): {where}"
        ),
        "pool_trials_over_batches": Figure.of(
            walls,
            "x batches",
            "<= 0.75",
            note=f"sweep wall time, trial by trial / batches of 4: {where}; the trials' span "
            f"alone: {statistics.median(spans):.3f}",
        ),  # fmt: skip
    }


def measure(repeats: int = 2) -> dict[str, Figure]:
    return {**measure_schedules(), **measure_devices(repeats)}


def measure_devices(repeats: int = 2) -> dict[str, Figure]:
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
