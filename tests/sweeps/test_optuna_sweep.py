"""`python train.py -m hparams_search=...` end to end: a crash mid-trial loses nothing, the
same command resumes, several workers share one study."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from tests.helpers import ROOT, poison

KILL = "+callbacks.kill._target_=tests.sweeps.callbacks.KillOnceInRun"


def sweep(sweep_dir: Path, *args: str, n_trials: int = 4) -> subprocess.Popen:
    """A digits Optuna sweep of tiny trials (3 steps an epoch, 2 epochs) in sweep_dir."""
    command = [
        sys.executable, "train.py", "-m", "hparams_search=digits_optuna", "debug=limit",
        "test=false", f"hydra.sweeper.n_trials={n_trials}", f"hydra.sweep.dir={sweep_dir}", *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, "CI": "1", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen) -> tuple[int, str]:
    out, _ = process.communicate(timeout=600)
    return process.returncode, out


def trials_csv(sweep_dir: Path) -> list[dict[str, str]]:
    with open(sweep_dir / "trials.csv") as f:
        return list(csv.DictReader(f))


# Slow for CI time; make test covers it by a sweep's rerun resuming: test_upstream_config; a run resuming after a kill: checkpointing/test_preemption.
@pytest.mark.slow
def test_a_sweep_killed_mid_trial_resumes_that_trial_from_its_checkpoint(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = (KILL, "+callbacks.kill.step=5", "+callbacks.kill.run=2", "hydra.sweeper.pruner=none")
    code, out = finish(sweep(sweep_dir, *args))
    assert code == -9, out[-3000:]
    assert (sweep_dir / "2" / "checkpoints").is_dir()  # the checkpoint of step 3 was written

    code, out = finish(sweep(sweep_dir, *args))
    assert code == 0, out[-3000:]
    assert "trial 2 was interrupted (its worker is gone)" in out
    assert "trial 3 continues trial 2" in out
    assert "resuming from" in (sweep_dir / "2" / "train.log").read_text()
    rows = trials_csv(sweep_dir)
    counted = [r for r in rows if "interrupted" not in r["note"]]
    assert len(counted) == 4 and all(r["state"] == "COMPLETE" for r in counted)
    assert [r["note"] for r in rows if r["number"] in ("2", "3")] == [
        "interrupted: its worker is gone", "retry of trial 2"
    ]  # fmt: skip
    assert sorted(p.name for p in sweep_dir.iterdir() if p.name.isdigit()) == ["0", "1", "2", "4"]
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    assert Path(best["run_dir"]).parent == sweep_dir
    assert best["best_checkpoint"].endswith(".ckpt")
    assert (sweep_dir / "optimization_history.png").stat().st_size > 0
    assert (sweep_dir / "param_importances.png").stat().st_size > 0

    code, out = finish(sweep(sweep_dir))  # finished: runs nothing, prints the best
    assert code == 0, out[-3000:]
    assert "Launching" not in out and f"best: trial {best['trial']}" in out


def test_two_workers_started_together_share_one_study(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"  # a fresh database: the schema race
    workers = [
        sweep(
            tmp_path / f"worker{i}", f"hydra.sweeper.storage={storage}", "hydra.sweeper.pruner=none"
        )
        for i in range(2)
    ]
    for worker in workers:
        code, out = finish(worker)
        assert code == 0, out[-3000:]
    study = optuna.load_study(study_name="digits_optuna", storage=storage)
    trials = study.get_trials()
    counted = [t for t in trials if "litforge:not_counted" not in t.system_attrs]
    assert len(counted) == 4 and all(t.state.name == "COMPLETE" for t in counted)
    ran = sorted(
        p.name for i in range(2) for p in (tmp_path / f"worker{i}").iterdir() if p.name.isdigit()
    )
    assert ran == sorted(str(t.number) for t in counted)  # each trial ran once, by one worker


# The gap between two trials made wide (tests/sweeps/callbacks.py): the next ask pauses 1 s,
# the next job 3 s after the launcher composed it, before its code.
PAUSES = (
    "hydra.sweeper.sampler={_target_:tests.sweeps.callbacks.PausedSampler,pause_s:1.0}",
    "+hydra.callbacks.pause._target_=tests.sweeps.callbacks.PauseAtLaterJobs",
    "+hydra.callbacks.pause.seconds=3.0",
    "hydra.sweeper.pruner=none",
    "+callbacks.mark._target_=tests.sweeps.callbacks.MarkFitStart",
)


@pytest.mark.parametrize(
    "delay",
    [pytest.param(0.0, marks=pytest.mark.slow), pytest.param(0.6, marks=pytest.mark.slow), 3.0],
)
def test_a_sigterm_after_a_trial_finished_launches_no_other_trial(tmp_path, delay):
    """The SIGTERM comes `delay` s after a trial's `finished:` line: as the trial returns
    (0 s), while the next trial is asked (0.6 s), while its job starts (3 s). No other
    trial trains, the sweep exits 143, and a trial asked by then is queued to run next."""
    process = sweep(tmp_path / "sweep", *PAUSES, n_trials=3)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "finished:" in line and sum("finished:" in seen for seen in lines) == 1:
            time.sleep(delay)
            process.send_signal(signal.SIGTERM)
    code, out = process.wait(timeout=300), "".join(lines)
    assert code == 128 + signal.SIGTERM, out[-3000:]
    trained = sorted(p.parent.name for p in (tmp_path / "sweep").glob("*/fit-started"))
    assert trained == ["0"], out[-3000:]
    assert "SIGTERM received: study digits_optuna stopped before its next trial" in out
    first, *others = trials_csv(tmp_path / "sweep")
    assert first["state"] == "COMPLETE"
    assert [(r["state"], r["note"]) for r in others] in (
        [],  # the signal came before the next ask
        [("FAIL", "not started: SIGTERM received before it"), ("WAITING", "retry of trial 1")],
    ), others


def test_a_failed_trials_note_says_what_the_sweep_does_with_it(tmp_path):
    """A NaN stops the trial after saving a checkpoint; the run's "the same command resumes
    from that checkpoint" is not true of a sweep, which never runs a failed trial again."""
    code, out = finish(sweep(tmp_path / "sweep", *poison(1), n_trials=1))
    assert code == 1, out[-3000:]  # no trial of the study finished
    (row,) = trials_csv(tmp_path / "sweep")
    assert row["state"] == "FAIL" and "saved a checkpoint at step 2" in row["note"], row
    assert row["note"].endswith("the sweep counts this trial as failed and does not run it again")
    assert "resumes" not in row["note"]
    assert [
        line for line in out.splitlines() if "trial 0 failed" in line and "resumes" in line
    ] == []
