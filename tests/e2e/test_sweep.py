"""`python train.py -m ...`: each job of a sweep is its own run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.mark.slow  # the DDP sweep test below checks the same keys (sw-0, sw-1) in the fast tier
def test_named_sweep_jobs_do_not_resume_each_other(tmp_path):
    """Issue 9.5: job 1 'resumed' from job 0's final checkpoint and reported its accuracy."""
    store = tmp_path / "ckstore"
    result = subprocess.run(
        [sys.executable, "train.py", "-m", "model.optimizer.lr=1e-3,1e-2", "run_name=sw",
         f"checkpoint.dir={store}", "debug=limit", "test=false",
         f"hydra.sweep.dir={tmp_path / 'multi'}"],
        cwd=ROOT, env={**os.environ, "CI": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from" not in result.stdout
    jobs = sorted(p.name for p in store.iterdir())
    assert jobs == ["sw-0", "sw-1"]
    for job in ("0", "1"):
        metrics = json.loads((tmp_path / "multi" / job / "metrics.json").read_text())
        assert metrics["global_step"] == 6
    assert (store / "sw-1" / "step-00000006.ckpt.complete").is_file()


def test_ddp_sweep_job_runs_once_per_rank_with_its_own_values(tmp_path):
    """Each child rank of a DDP job runs that job only, in its directory, with its values and
    checkpoint location (every rank probes it: a wrong key would leave a directory); the
    second job starts its own processes (nothing of the first job's group is left)."""
    sweep, store = tmp_path / "multi", tmp_path / "ckstore"
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", "model.optimizer.lr=1e-3,1e-2",
         "trainer.devices=2", "debug=limit", "test=false", f"hydra.sweep.dir={sweep}",
         "run_name=sw", f"checkpoint.dir={store}",
         "+callbacks.record_hparams._target_=tests.helpers.RecordHparams"],
        cwd=tmp_path, env={**os.environ, "CI": "1"},  # cwd: a stray multirun/ would land here
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (result.stdout + result.stderr).count("Launching 2 jobs locally") == 1
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "1", "multirun.yaml"]
    for job, lr in (("0", 1e-3), ("1", 1e-2)):
        ranks = [json.loads((sweep / job / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert ranks == [{"lr": lr, "rank": 0}, {"lr": lr, "rank": 1}]
        assert json.loads((sweep / job / "metrics.json").read_text())["global_step"] == 6
    assert sorted(p.name for p in store.iterdir()) == ["sw-0", "sw-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckstore", "multi"]


# Slow for CI time; make test covers it by a multi-objective study: test_dropin's pareto front.
@pytest.mark.slow
def test_a_multi_objective_sweep_of_train_py(tmp_path):
    sweep_dir = tmp_path / "multi"
    result = subprocess.run(
        [sys.executable, "train.py", "-m", "hparams_search=digits_optuna", "debug=limit",
         "test=false", "optimized_metric=[val/loss,val/acc]", "hydra.sweeper.direction=[min,max]",
         "hydra.sweeper.pruner=none", "~callbacks.optuna_pruning", "checkpoint.monitor=val/acc",
         "checkpoint.mode=max", "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, env={**os.environ, "CI": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    header = (sweep_dir / "trials.csv").read_text().splitlines()[0].split(",")
    assert header[2:4] == ["val/loss", "val/acc"]
    best = (sweep_dir / "best.yaml").read_text()
    assert "pareto_front:" in best and "val/acc:" in best
    assert (sweep_dir / "pareto_front.png").is_file()
