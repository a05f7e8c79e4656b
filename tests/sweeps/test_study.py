"""Leases, retries and the trials that count, on a real journal storage."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from litforge.errors import ConfigError, redact_url
from litforge.sweeps import study as studies
from litforge.sweeps.study import LEASE, NOT_COUNTED, RETRY_OF

SETTINGS = {"study_name": "s", "storage": None, "direction": "max", "pruner": "none"}
SPACE = {"x": optuna.distributions.FloatDistribution(0, 1)}


@pytest.fixture
def study(tmp_path) -> optuna.Study:
    return studies.open_study(SETTINGS, tmp_path, SETTINGS["study_name"])


def dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def lease(study: optuna.Study, trial: optuna.Trial, host: str, pid: int, age_s: float) -> None:
    record = {"host": host, "pid": pid, "heartbeat": time.time() - age_s}
    study._storage.set_trial_system_attr(trial._trial_id, LEASE, record)


def test_a_trial_of_a_dead_local_worker_is_retried_at_once_with_its_parameters(study):
    trial = study.ask(SPACE)
    lease(study, trial, socket.gethostname(), dead_pid(), age_s=0)
    assert studies.reap_stale(study, stale_s=300) == [0]
    failed, retry = study.get_trials()
    assert failed.state == TrialState.FAIL and failed.system_attrs[NOT_COUNTED].startswith(
        "interrupted"
    )
    assert retry.state == TrialState.WAITING and retry.system_attrs[RETRY_OF] == 0
    again = study.ask(SPACE)  # the queued copy comes first, with the same x
    assert again.number == 1 and again.params == trial.params
    assert studies.lineage(study.trials[1]) == 0 and not studies.counts(failed)


def test_another_machines_trial_waits_for_its_heartbeat_to_go_stale(study):
    trial = study.ask(SPACE)
    lease(study, trial, "some-other-host", 1, age_s=10)
    assert studies.reap_stale(study, stale_s=300) == []
    lease(study, trial, "some-other-host", 1, age_s=400)
    assert studies.reap_stale(study, stale_s=300) == [0]
    assert studies.reap_stale(study, stale_s=300) == []  # once: the copy is WAITING, not RUNNING


def test_a_held_lease_is_renewed_by_the_heartbeat_and_not_after_it_is_dropped(study):
    trial = study.ask(SPACE)
    leases = studies.Leases(study, heartbeat_s=0.05)
    try:
        leases.take(trial._trial_id)
        first = study.trials[0].system_attrs[LEASE]["heartbeat"]
        deadline = time.monotonic() + 10
        while study.trials[0].system_attrs[LEASE]["heartbeat"] == first:
            assert time.monotonic() < deadline, "the lease was never renewed"
            time.sleep(0.02)
        leases.drop(trial._trial_id)
        time.sleep(0.2)  # let a renewal already in flight land
        dropped = study.trials[0].system_attrs[LEASE]["heartbeat"]
        time.sleep(0.3)  # six heartbeats
        assert study.trials[0].system_attrs[LEASE]["heartbeat"] == dropped
    finally:
        leases.close()


def test_live_lineages_leave_out_set_aside_trials(study):
    for value in (0.1, 0.2):
        study.tell(study.ask(SPACE), value)
    aside = study.ask(SPACE)
    study._storage.set_trial_system_attr(aside._trial_id, NOT_COUNTED, "config error")
    study.tell(aside, state=TrialState.FAIL)
    study.ask(SPACE)
    assert studies.live_lineages(study.get_trials()) == [0, 1, 3]


def test_storage_mistakes_are_one_line_without_the_password(tmp_path):
    assert redact_url("postgresql://me:pw@host/db") == "postgresql://host/db"
    assert redact_url("sqlite:///x.db") == "sqlite:///x.db"
    with pytest.raises(ConfigError, match=r"storage=mysql://127.0.0.1:9/x: cannot open it"):
        studies.storage_for("mysql://u:pw@127.0.0.1:9/x", tmp_path)
