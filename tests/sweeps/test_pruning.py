"""The pruning callback in a real training run against a real (journal) study."""

from __future__ import annotations

import pytest
from hydra.conf import HydraConf
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf
from optuna.trial import TrialState

from litforge.errors import ConfigError
from litforge.monitors.numerics.stop import NumericsFault
from litforge.sweeps.study import STOPPED, open_study
from litforge.training import train

SETTINGS = {
    "study_name": "s", "storage": None, "direction": "min", "pruner": "median",
    "pruner_options": {"n_startup_trials": 1, "n_warmup_steps": 0},
}  # fmt: skip


@pytest.fixture
def study(tmp_path):
    """A study whose trial 0 reached val/loss 0.01; trial 1 is asked, to be run."""
    hydra = OmegaConf.structured(HydraConf)
    hydra.sweeper, hydra.sweep.dir, hydra.mode = SETTINGS, str(tmp_path), RunMode.RUN
    HydraConfig.instance().set_config(OmegaConf.create({"hydra": hydra}))
    study = open_study(SETTINGS, tmp_path, SETTINGS["study_name"])
    first = study.ask()
    for step in (3, 6):
        first.report(0.01, step)
    study.tell(first, 0.01)
    study.ask()
    yield study
    HydraConfig.instance().cfg = None


def run(make_cfg, *overrides: str) -> dict:
    cfg = make_cfg(
        "hparams_search=digits_optuna", "debug=limit", "test=false",
        "optimized_metric=val/loss", "optimized_mode=min", "callbacks.optuna_pruning.trial=1",
        *overrides,
    )  # fmt: skip
    return train(cfg)


def test_a_trial_worse_than_the_median_stops_at_its_first_validation(study, make_cfg):
    metrics = run(make_cfg)
    trial = study.trials[1]
    assert metrics["global_step"] == 3  # of 6: stopped after the first validation
    assert trial.system_attrs[STOPPED].startswith("pruned at step 3")
    assert list(trial.intermediate_values) == [3]
    assert trial.state == TrialState.RUNNING  # the sweeper tells the outcome, not the run


def test_a_non_finite_metric_stops_the_run(study, make_cfg):
    # The numerics watch warns only: the pruning callback sees the NaN validation loss and
    # stops the run at its first validation; its weights are not finite, so it fails.
    with pytest.raises(NumericsFault, match=r"not finite at the end of training \(step 3,"):
        run(
            make_cfg,
            "model.optimizer.lr=1e30",
            "model.scheduler=null",
            "callbacks.numerics.policy=warn",
        )
    assert study.trials[1].system_attrs[STOPPED].startswith("not finite: val/loss=nan")


def test_a_metric_never_logged_names_optimized_metric_and_what_was_logged(study, make_cfg):
    with pytest.raises(ConfigError, match=r"optimized_metric=val/nope was not logged .*val/acc"):
        run(make_cfg, "optimized_metric=val/nope", "checkpoint=none")
