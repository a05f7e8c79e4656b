"""How the sweeper records each way a trial ends (litforge.sweeps.sweep.Sweep._tell), on a
real journal study and Hydra's own JobReturn."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf
from optuna.trial import TrialState

from litforge.checkpointing.preemption import Preempted
from litforge.errors import ConfigError
from litforge.sweeps import signals
from litforge.sweeps import study as studies
from litforge.sweeps.study import ERROR, NOT_COUNTED, RETRY_OF, STOPPED
from litforge.sweeps.sweep import Sweep

SETTINGS = {"study_name": "s", "storage": None, "direction": "min", "pruner": "none"}


class BasicLauncher:
    """Named as Hydra's in-process launcher: how the sweep tells this machine's jobs apart."""


@pytest.fixture
def setup(tmp_path):
    study = studies.open_study(SETTINGS, tmp_path, SETTINGS["study_name"])
    sweeper = SimpleNamespace(
        settings=SETTINGS, config=OmegaConf.create({"optimized_metric": "val/loss"}),
        launcher=BasicLauncher(), validate_batch_is_legal=lambda batch: None,
    )  # fmt: skip
    return Sweep(sweeper), study


def ended(study, outcome) -> JobReturn:
    trial = study.ask()
    result = JobReturn()
    if isinstance(outcome, BaseException):
        result.status, result._return_value = JobStatus.FAILED, outcome
    else:
        result.status, result.return_value = JobStatus.COMPLETED, outcome
    return trial, result


def test_a_value_completes_a_nan_fails_and_the_sweep_goes_on(setup):
    sweep, study = setup
    for outcome in (0.5, float("nan"), None, RuntimeError("CUDA error")):
        sweep._tell(study, *ended(study, outcome))
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.FAIL, TrialState.FAIL, TrialState.FAIL]
    assert [t.user_attrs.get(ERROR) for t in study.trials[1:]] == [
        "val/loss is nan", "val/loss is None", "RuntimeError: CUDA error"
    ]  # fmt: skip
    assert all(studies.counts(t) for t in study.trials) and sweep.stopped_by is None


def test_a_pruned_run_is_recorded_as_pruned(setup):
    sweep, study = setup
    trial, result = ended(study, 2.0)
    trial.report(2.0, 3)
    study._storage.set_trial_system_attr(trial._trial_id, STOPPED, "pruned at step 3")
    sweep._tell(study, trial, result)
    assert study.trials[0].state == TrialState.PRUNED and study.trials[0].value == 2.0


def test_a_config_error_stops_the_sweep_and_does_not_count(setup):
    sweep, study = setup
    sweep._tell(study, *ended(study, ConfigError("data.batch_size=0 ...")))
    (trial,) = study.trials
    assert trial.state == TrialState.FAIL and trial.system_attrs[NOT_COUNTED] == (
        "config error: not counted; once it is fixed, a rerun runs a new trial in its place"
    )
    assert trial.user_attrs[ERROR] == "data.batch_size=0 ..."
    assert sweep.stopped_by[0] == 0 and not studies.counts(trial)


def test_a_preempted_trial_is_queued_to_continue_and_the_sweep_stops(setup):
    sweep, study = setup
    sweep._tell(study, *ended(study, Preempted(15, step=3, store="file://x")))
    interrupted, retry = study.trials
    assert interrupted.system_attrs[NOT_COUNTED].startswith("interrupted")
    assert retry.state == TrialState.WAITING and retry.system_attrs[RETRY_OF] == 0
    assert sweep.stopped_by is not None


def test_trials_are_tied_to_their_study_in_every_tracker(make_cfg, tmp_path):
    def overrides(*args: str) -> list[str]:
        config = make_cfg("hparams_search=digits_optuna", *args)
        sweeper = SimpleNamespace(
            settings=SETTINGS, config=config, launcher=None, validate_batch_is_legal=None
        )
        return Sweep(sweeper).trial_overrides(7, "digits_optuna", tmp_path)

    assert overrides("logger=many") == [
        "callbacks.optuna_pruning.trial=7", "logger.wandb.group=digits_optuna"
    ]  # fmt: skip
    assert overrides("logger=mlflow")[1:] == [
        "logger.mlflow.parent_run=digits_optuna",
        f"logger.mlflow.tracking_uri=sqlite:///{tmp_path}/mlflow.db",  # one store for the study
    ]
    assert overrides("logger=mlflow", "logger.mlflow.tracking_uri=http://tracking:5000")[1:] == [
        "logger.mlflow.parent_run=digits_optuna"
    ]


def test_a_trial_stopped_by_the_numerics_watch_fails_and_is_not_queued_again(setup):
    from litforge.monitors.numerics.callback import NumericsFault

    sweep, study = setup
    sweep._tell(study, *ended(study, NumericsFault("non-finite loss at step 3")))
    (trial,) = study.trials  # no retry queued: a NaN would come back the same
    assert trial.state == TrialState.FAIL and studies.counts(trial)
    assert trial.user_attrs[ERROR] == "NumericsFault: non-finite loss at step 3"
    assert sweep.stopped_by is None  # the sweep goes on


def test_a_trial_launched_after_a_signal_is_queued_to_run_and_the_sweep_stops(setup):
    sweep, study = setup
    sweep._tell(study, *ended(study, signals.NotStarted(15)))
    asked, queued = study.trials
    assert asked.system_attrs[NOT_COUNTED] == "not started: SIGTERM received before it"
    assert queued.state == TrialState.WAITING and queued.system_attrs[RETRY_OF] == 0
    number, err = sweep.stopped_by
    assert number is None and isinstance(err, signals.SweepStopped) and err.exit_code == 143


def test_the_last_check_before_a_trials_code_sees_a_real_signal():
    watch = signals.SignalWatch()
    signals.refuse_to_start()  # no sweep in this process: nothing to refuse
    with watch.active():
        signals.refuse_to_start()
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(signals.NotStarted, match="not started: SIGTERM received before it"):
            signals.refuse_to_start()
    signals.refuse_to_start()  # the sweep ended: its signal refuses nothing after it


@pytest.mark.parametrize(
    "advice",
    [
        "the same command resumes from that checkpoint",  # a checkpoint was saved
        "the same command resumes from the newest complete checkpoint in file:///c, if any",
        "a rerun starts over",  # checkpoint=none
    ],
)
def test_a_failed_trials_note_says_the_sweep_does_not_run_it_again(setup, advice):
    """A run's advice on going on is true of a run, not of a counted failure in a sweep."""
    from litforge.monitors.numerics.callback import NumericsFault

    sweep, study = setup
    fault = NumericsFault(
        f"non-finite loss at step 3: skipped it, stopped. Try the fixes; {advice}"
    )
    sweep._tell(study, *ended(study, fault))
    assert study.trials[0].user_attrs[ERROR] == (
        "NumericsFault: non-finite loss at step 3: skipped it, stopped. Try the fixes; "
        "the sweep counts this trial as failed and does not run it again"
    )


def test_an_interrupted_trial_keeps_its_advice_the_retry_makes_it_true(setup):
    sweep, study = setup
    sweep._tell(study, *ended(study, Preempted(15, step=3, store="file:///c")))
    note = study.trials[0].system_attrs[NOT_COUNTED]
    assert note.endswith("the same command resumes from it")
