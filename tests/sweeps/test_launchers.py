"""Optuna trials through other launch paths: DDP inside a trial (Lightning's launcher
re-running the one trial), and submitit's local executor (each trial its own process)."""

from __future__ import annotations

import json

import pytest

from tests.sweeps.test_optuna_sweep import finish, sweep, trials_csv


@pytest.mark.slow  # the basic sweeper's DDP job (tests/e2e/test_sweep.py) runs in the fast tier
def test_every_rank_of_a_ddp_trial_trains_with_the_sampled_values(tmp_path):
    sweep_dir = tmp_path / "sweep"
    code, out = finish(
        sweep(sweep_dir, "trainer.devices=2", "hydra.sweeper.pruner=none",
              "+callbacks.record_hparams._target_=tests.helpers.RecordHparams", n_trials=2)
    )  # fmt: skip
    assert code == 0, out[-3000:]
    assert out.count("Launching 1 jobs locally") == 2  # once per trial: no child re-ran the sweep
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1"]
    for row in trials_csv(sweep_dir):
        lr = float(row["model.optimizer.lr"])
        run = sweep_dir / row["number"]
        ranks = [json.loads((run / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert ranks == [{"lr": lr, "rank": 0}, {"lr": lr, "rank": 1}]
        assert row["state"] == "COMPLETE"


@pytest.mark.slow  # a fresh process per trial: ~25 s; the in-process launcher is the fast tier's
def test_trials_run_through_submitit_local(tmp_path):
    sweep_dir = tmp_path / "sweep"
    code, out = finish(sweep(sweep_dir, "hydra/launcher=submitit_local", n_trials=1))
    assert code == 0, out[-3000:]
    assert "Submitit 'local' sweep output dir" in out
    (row,) = trials_csv(sweep_dir)
    assert row["state"] == "COMPLETE" and float(row["value"]) > 0
    assert json.loads((sweep_dir / "0" / "metrics.json").read_text())["global_step"] == 6


def test_the_slurm_launcher_composes_with_our_defaults_over_submitits():
    from hydra import compose, initialize_config_dir

    from tests.helpers import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            ["hparams_search=digits_optuna", "hydra/launcher=slurm"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert (
        launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    )
    assert (launcher.signal_delay_s, launcher.max_num_timeout, launcher.timeout_min) == (
        120,
        3,
        240,
    )
    assert cfg.hydra.sweeper._target_.endswith("OptunaSweeper")
