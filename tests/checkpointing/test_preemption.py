"""A real SIGTERM / SIGUSR1 to a training process: checkpoint, clear exit, same command resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import ROOT

ARGS = ["trainer.max_steps=150", "trainer.max_epochs=-1", "checkpoint.every_n_train_steps=10",
        "trainer.limit_val_batches=1", "test=false"]  # fmt: skip


def start(run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "train.py", *ARGS, *extra, f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, pytest.param(signal.SIGUSR1, marks=pytest.mark.slow)]
)
def test_signal_saves_exits_nonzero_and_rerun_resumes(tmp_path, signum, extra=()):
    run_dir = tmp_path / "run"
    process = start(run_dir, *extra)
    wait_for(run_dir / "checkpoints" / "step-00000010.ckpt.complete", process)
    process.send_signal(signum)  # to rank 0, as a cloud or SLURM would
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, stderr[-3000:]
    name = signal.Signals(signum).name
    assert f"error: {name} received: saved a checkpoint at step" in stderr
    step = int(stderr.split("saved a checkpoint at step ")[1].split()[0])
    assert step < 150
    saved = run_dir / "checkpoints" / f"step-{step:08d}.ckpt"
    assert (saved.parent / (saved.name + ".complete")).is_file()
    assert torch.load(saved, weights_only=True)["global_step"] == step

    rerun = start(run_dir, *extra)
    stdout, stderr = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, stderr[-3000:]
    assert f"resuming from {run_dir / 'checkpoints'}/step-{step:08d}.ckpt" in stdout
    assert (run_dir / "checkpoints" / "step-00000150.ckpt").is_file()


@pytest.mark.slow
def test_ddp_ranks_agree_on_preemption(tmp_path):
    test_signal_saves_exits_nonzero_and_rerun_resumes(
        tmp_path, signal.SIGTERM, extra=("trainer.devices=2",)
    )
