"""Figures `ddp2_step_time` and `elastic_recovery_s` (issue 13), both reported, no goal.

ddp2_step_time  wall time per optimizer step of the digits template as 2 DDP processes over
                gloo / as 1 process, the same data.batch_size per process: what the
                gradient all-reduce and a second process on the same cores cost. Wall
                time, timed by rank 0 between two steps of one run (start-up not counted),
                because two processes' CPU time would count the work twice. On a 2-core
                machine the two processes share the cores.
elastic_recovery_s  seconds from the SIGKILL of one of two torchrun workers to the first
                optimizer step after torchrun restarted the group (`--max-restarts=1`),
                with the part until the new rank 0 process starts (/proc, ~1 s resolution):
                the rest is the new processes' imports, set-up, rendezvous and the
                checkpoint load.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L

from benchmarks.harness import ROOT
from benchmarks.stats import Figure, interleaved, ratios

BASE = ["train.py", "experiment=digits_cnn", "trainer=cpu", "test=false", "logger=none",
        "trainer.limit_val_batches=0", "trainer.max_epochs=-1"]  # fmt: skip
STEPS = (5, 45)  # timed between these optimizer steps, inside one run


def _env() -> dict[str, str]:
    return {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def _per_step(devices: int) -> float:
    start, end = STEPS
    with tempfile.TemporaryDirectory(prefix="litforge-bench-ddp-") as run_dir:
        out = Path(run_dir) / "per_step"
        argv = [sys.executable, *BASE, "checkpoint=none", f"trainer.devices={devices}",
                f"trainer.max_steps={end}", f"hydra.run.dir={run_dir}",
                "+callbacks.clock._target_=benchmarks.distributed.StepClock",
                f"+callbacks.clock.out={out}", f"+callbacks.clock.start={start}",
                f"+callbacks.clock.end={end}"]  # fmt: skip
        subprocess.run(argv, cwd=ROOT, env=_env(), check=True, capture_output=True)
        return float(out.read_text())


def _process_start() -> float:
    """This process's start, in seconds since the epoch (Linux /proc), before any import."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime"))  # fmt: skip
    return boot + ticks / os.sysconf("SC_CLK_TCK")


class StepClock(L.Callback):
    """Rank 0 writes the wall seconds per optimizer step between steps `start` and `end`."""

    def __init__(self, out: str, start: int, end: int) -> None:
        self.out, self.start, self.end = Path(out), start, end
        self.t0 = 0.0

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_rank != 0:
            return
        if trainer.global_step == self.start:
            self.t0 = time.perf_counter()
        elif trainer.global_step == self.end:
            per_step = (time.perf_counter() - self.t0) / (self.end - self.start)
            self.out.write_text(str(per_step))


class MarkRecovery(L.Callback):
    """Attempt 0: rank 1 writes the time and SIGKILLs itself at step 3. Attempt 1: rank 0
    writes the time of its process start and of its first optimizer step."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.started = _process_start()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.attempt == 0 and trainer.global_rank == 1 and trainer.global_step == 3:
            (self.out / "killed").write_text(str(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        if self.attempt == 1 and trainer.global_rank == 0 and not (self.out / "step").exists():
            (self.out / "started").write_text(str(self.started))
            (self.out / "step").write_text(str(time.time()))


def _recovery() -> tuple[float, float]:
    """(kill -> first step after the restart, kill -> the new process's start), seconds."""
    with tempfile.TemporaryDirectory(prefix="litforge-bench-elastic-") as out:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [sys.executable, "-m", "torch.distributed.run", "--max-restarts=1",
                "--nproc_per_node=2", "--master_addr=127.0.0.1", f"--master_port={port}",
                *BASE, "trainer.devices=2", "trainer.max_steps=6", "run_name=elastic",
                "checkpoint.every_n_train_steps=2", "checkpoint.monitor=null",
                f"hydra.run.dir={out}/run", "+callbacks.mark._target_=benchmarks.distributed.MarkRecovery",
                f"+callbacks.mark.out={out}"]  # fmt: skip
        subprocess.run(argv, cwd=ROOT, env=_env(), check=True, capture_output=True)
        killed, started, step = (float((Path(out) / n).read_text()) for n in ("killed", "started", "step"))  # fmt: skip
        return step - killed, started - killed


def measure(repeats: int = 3) -> dict[str, Figure]:
    values = interleaved({"ddp2": lambda: _per_step(2), "one": lambda: _per_step(1)}, repeats)
    recoveries = [_recovery() for _ in range(repeats)]
    total = [r[0] for r in recoveries]
    return {
        "ddp2_step_time": Figure.of(
            ratios(values, "ddp2", "one"),
            "x 1 process",
            note="2 DDP processes (gloo) / 1 process, wall time per step, same per-process batch",
            extra={
                "s_per_step_median": {k: round(statistics.median(v), 4) for k, v in values.items()}
            },
        ),
        "elastic_recovery_s": Figure.of(
            total,
            "s",
            note="SIGKILL of 1 of 2 torchrun workers -> first optimizer step after the restart",
            extra={"to_new_process_s": round(statistics.median(r[1] for r in recoveries), 2)},
        ),
    }


if __name__ == "__main__":
    print(json.dumps({k: v.to_json() for k, v in measure(1).items()}, indent=1))
