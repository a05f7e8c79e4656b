"""One study, several workers: two sweep processes on a real PostgreSQL server (a throwaway
cluster on 127.0.0.1, tests/postgres.py) or on one journal file complete exactly n_trials,
each with its own parameters; a worker killed mid-trial leaves that trial to the next; the
password never shows; optuna-dashboard serves the study."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest

from tests import postgres
from tests.s3server import free_port
from tests.sweeps.test_dropin import APP, rows

N_TRIALS = 6


@pytest.fixture(scope="module")
def pg():
    if postgres.server_bin() is None:
        pytest.skip("PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql)")
    with postgres.running() as server:
        yield server


def worker(sweep_dir: Path, storage: str, seed: int, study: str, env: dict | None = None):
    command = [sys.executable, "app.py", f"hydra.sweep.dir={sweep_dir}",
               f"hydra.sweeper.storage={storage}", f"hydra.sweeper.study_name={study}",
               f"hydra.sweeper.n_trials={N_TRIALS}", f"hydra.sweeper.seed={seed}",
               "hydra.sweeper.sampler=random"]  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    environment.update({"TRIAL_SLEEP": "0.3", **(env or {})})
    return subprocess.Popen(
        command, cwd=APP, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def study_of(storage: optuna.storages.BaseStorage, study: str) -> optuna.Study:
    return optuna.load_study(study_name=study, storage=storage)


def _two_workers(tmp_path: Path, storage_arg: str, storage: optuna.storages.BaseStorage,
                 study: str, env: dict | None = None) -> str:  # fmt: skip
    workers = [worker(tmp_path / f"w{i}", storage_arg, i + 1, study, env) for i in range(2)]
    outputs = []
    for w in workers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err[-3000:]
        outputs.append(out + err)
    trials = study_of(storage, study).trials
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == N_TRIALS  # exactly n_trials, between them
    assert len({t.params["x"] for t in done}) == N_TRIALS  # each its own parameters
    ran = [int(t.user_attrs["litforge:run_dir"].rsplit("/", 1)[-1]) for t in done]
    assert sorted(ran) == sorted({t.number for t in done})  # no trial ran twice
    return "\n".join(outputs)


# Slow for CI time; make test covers it by two workers sharing one study (journal): test_optuna_sweep.
@pytest.mark.slow
def test_two_workers_share_one_study_on_postgres(tmp_path, pg):
    # The storage URL from the environment: no password in it, PGPASSWORD beside it.
    env = {**pg.env, "SWEEP_STORAGE": pg.url}
    out = _two_workers(tmp_path, "${oc.env:SWEEP_STORAGE}", _rdb(pg), "two", env=env)
    written = [
        p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".yaml", ".csv", ".log")
    ]
    assert written
    for text in [out, *(p.read_text() for p in written)]:
        assert postgres.PASSWORD not in text


@pytest.mark.slow
def test_two_workers_share_one_study_on_a_journal_file(tmp_path):
    journal = tmp_path / "shared.journal"
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))
    )  # created by the first worker; read here after both end
    _two_workers(tmp_path, str(journal), storage, "two")


@pytest.mark.slow
def test_a_worker_killed_mid_trial_leaves_it_to_the_other(tmp_path, pg):
    hang = tmp_path / "hung"
    first = worker(tmp_path / "a", pg.url, 1, "killed", env={**pg.env, "HANG_ONCE": str(hang)})
    deadline = time.monotonic() + 120
    while not hang.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert hang.exists(), first.stderr.read() if first.poll() is not None else "no trial started"
    first.send_signal(signal.SIGKILL)
    first.wait()
    second = worker(tmp_path / "b", pg.url, 2, "killed", env=pg.env)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err[-3000:]
    trials = study_of(_rdb(pg), "killed").trials
    killed = trials[0]
    retry = [t for t in trials if t.system_attrs.get("litforge:retry_of") == killed.number]
    assert retry and retry[0].state == optuna.trial.TrialState.COMPLETE
    assert retry[0].params == killed.params  # the same trial, continued
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == N_TRIALS


def _rdb(pg: postgres.Server) -> optuna.storages.RDBStorage:
    os.environ.update(pg.env)
    return optuna.storages.RDBStorage(pg.url)


# Slow for CI time; make test covers it by the dashboard's command line: tests/sweeps' fast cases.
@pytest.mark.slow
def test_the_dashboard_serves_a_sweeps_study(tmp_path):
    sweep = subprocess.run(
        [sys.executable, "app.py", f"hydra.sweep.dir={tmp_path / 's'}", "hydra.sweeper.n_trials=2"],
        cwd=APP, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert len(rows(tmp_path / "s")) == 2
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "litforge.sweeps.dashboard", str(tmp_path / "s"), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline, body = time.monotonic() + 60, None
        while body is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    body = json.loads(r.read())
            except OSError:
                time.sleep(0.3)
        assert body is not None, "the dashboard did not answer"
        assert [s["study_name"] for s in body["study_summaries"]] == ["app"]
    finally:
        server.terminate()
        server.wait(timeout=30)
