"""`python train.py -m hparams_search=...` end to end: a crash mid-trial loses nothing, the
same command resumes, several workers share one study."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import optuna
import yaml

from tests.helpers import ROOT

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
