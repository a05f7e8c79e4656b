"""Callbacks the sweep tests inject into trials (`+callbacks.NAME._target_=...`), a sampler
and a Hydra callback."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import lightning as L
import optuna
from hydra.experimental.callback import Callback


class KillOnceInRun(L.Callback):
    """SIGKILL the process at `step` in the run whose directory is named `run`, the first
    time only (a marker file beside the run directories remembers): a lost VM mid-trial."""

    def __init__(self, step: int, run: str | int) -> None:
        self.step, self.run = step, str(run)  # `run=2` arrives as an int

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        run_dir = Path(trainer.default_root_dir)
        marker = run_dir.parent / f"killed-{self.run}"
        if run_dir.name == self.run and trainer.global_step == self.step and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)


class MarkFitStart(L.Callback):
    """Leave `fit-started` in the run directory as training starts: which trials trained."""

    def on_fit_start(self, trainer: L.Trainer, *args: Any) -> None:
        (Path(trainer.default_root_dir) / "fit-started").touch()


# Stand-ins for the slow parts between two trials (a GP sampler's ask takes seconds; so
# can composing a big config): they widen the gap, after this process's first trial, so
# that a signal the test sends can land in each part of it whatever the machine's load.
_ASKED = {"count": 0}


class PausedSampler(optuna.samplers.RandomSampler):
    """Optuna's RandomSampler that pauses `pause_s` in each ask after the process's first."""

    def __init__(self, seed: int | None = None, pause_s: float = 0.0) -> None:
        super().__init__(seed=seed)
        self.pause_s = pause_s

    def before_trial(self, study: Any, trial: Any) -> None:
        _ASKED["count"] += 1
        if _ASKED["count"] > 1:
            time.sleep(self.pause_s)
        super().before_trial(study, trial)


class PauseAtLaterJobs(Callback):
    """A Hydra callback (`+hydra.callbacks.NAME._target_=...`) that sleeps `seconds` as each
    job after the process's first starts: after the launcher composed it, before its code."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.jobs = 0

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        self.jobs += 1
        if self.jobs > 1:
            time.sleep(self.seconds)


class SignalSweepWhenAllTrain(L.Callback):
    """Under hydra/launcher=gpus: at step 3 each trial process waits for the other `trials`
    to get there (marker files in the sweep directory); the last to arrive sends `signum`
    (SIGTERM; 9 for a kill -9) to the sweep ($LITFORGE_SWEEP_PID: the trial's parent is
    its guard), once. So every trial is mid-training when the signal comes."""

    def __init__(self, trials: int, signum: int = signal.SIGTERM) -> None:
        self.trials, self.signum = trials, signum

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        run_dir = Path(trainer.default_root_dir)
        sweep_dir, sent = run_dir.parent, run_dir.parent / "sweep-signalled"
        if trainer.global_step != 3 or sent.exists():
            return
        (sweep_dir / f"training-{run_dir.name}").touch()
        deadline = time.monotonic() + 300
        while not sent.exists() and time.monotonic() < deadline:
            if len(list(sweep_dir.glob("training-*"))) >= self.trials:
                sent.touch()
                os.kill(int(os.environ["LITFORGE_SWEEP_PID"]), self.signum)
                return
            time.sleep(0.1)


class RecordPeakMemory(L.Callback):
    """Write the fit's start, end and CUDA peak (`torch.cuda.max_memory_allocated`) to
    peak.json in the run directory."""

    def on_fit_start(self, trainer: L.Trainer, *args: Any) -> None:
        self.start = time.time()

    def on_fit_end(self, trainer: L.Trainer, *args: Any) -> None:
        import json

        import torch

        peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
        record = {"start": self.start, "end": time.time(), "peak": peak}
        (Path(trainer.default_root_dir) / "peak.json").write_text(json.dumps(record))
