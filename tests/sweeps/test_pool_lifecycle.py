"""No trial of `hydra/launcher=gpus` outlives its sweep: SIGTERM reaches every trial and
what still runs kill_after_s later is killed; the settings, a failed trial and an
in-process start are one line each."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time

import pytest
from hydra.core.global_hydra import GlobalHydra

from litforge.errors import ConfigError
from litforge.sweeps.pool import settings
from litforge.sweeps.pool.entry import entry_command
from litforge.sweeps.pool.trial_process import GUARD
from tests.helpers import ROOT
from tests.sweeps.pool_app import app
from tests.sweeps.test_gpu_pool import _alive, finish, jobs_seen, plain_sweep


def _wait_for(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)
    return check()


@pytest.mark.parametrize(
    ("sweeper", "stopped"),
    [
        ((), -signal.SIGTERM),  # Hydra's basic sweeper: SIGTERM's own default, after the trials
        (
            (
                "hydra/sweeper=litforge_optuna",
                "hydra.sweeper.n_jobs=2",
                "hydra.sweeper.n_trials=2",
                "hydra.sweeper.sampler=grid",
            ),
            128 + signal.SIGTERM,
        ),  # fmt: skip
    ],
)
def test_sigterm_reaches_every_trial_and_one_that_ignores_it_is_killed_after_kill_after_s(
    tmp_path, sweeper, stopped
):
    process = plain_sweep(
        tmp_path, "hydra.launcher.devices=[0,1]", "x=1,2", "sleep=600", "stubborn_on=1",
        "blocked_on=2", "children=1", "hydra.launcher.kill_after_s=2", *sweeper,
    )  # fmt: skip
    assert _wait_for(lambda: len(jobs_seen(tmp_path)) == 2, 120), process.stdout
    seen = jobs_seen(tmp_path)
    pids = [s["pid"] for s in seen] + [c for s in seen for c in s["children"]]
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    code, out = finish(process, timeout=60)
    took = time.monotonic() - signalled
    assert code == stopped, out[-3000:]
    assert 2 <= took < 2 + 20, took  # the grace period, and not forever
    assert not any(_alive(p) for p in pids), pids  # the trials' own children too
    killed = (
        "ended: TrialStoppedEarly: SIGTERM from the sweep: the trial was still running "
        "hydra.launcher.kill_after_s=2 s later, so it was killed"
    )
    assert out.count(killed) == 2, out[-3000:]


def test_the_guard_kills_its_trial_and_the_trials_children_when_the_sweep_is_gone(tmp_path):
    # The trial blocks SIGTERM and waits in native code; its child ignores SIGTERM.
    trial = (
        "import os, signal, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
        f"open({str(tmp_path / 'pids')!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "os.read(os.pipe()[0], 1)\n"
    )
    read_end, write_end = os.pipe()
    guard = subprocess.Popen(
        [sys.executable, str(GUARD), str(read_end), "1", "--", sys.executable, "-c", trial],
        pass_fds=(read_end,), start_new_session=True,
    )  # fmt: skip
    os.close(read_end)
    assert _wait_for(lambda: (tmp_path / "pids").exists(), 60)
    pids = [guard.pid, *map(int, (tmp_path / "pids").read_text().split())]
    time.sleep(0.5)
    assert all(_alive(p) for p in pids)  # the lifeline is open: nothing is stopped
    os.close(write_end)  # as when the sweep dies, kill -9 included
    guard.wait(timeout=30)
    assert _wait_for(lambda: not any(_alive(p) for p in pids), 10), pids


def test_the_guard_ends_with_its_trials_exit_status(tmp_path):
    read_end, write_end = os.pipe()
    for code, expected in (("raise SystemExit(7)", 7), ("import os; os.abort()", -6)):
        guard = subprocess.run(
            [sys.executable, str(GUARD), str(read_end), "5", "--", sys.executable, "-c", code],
            pass_fds=(read_end,), start_new_session=True, timeout=60,
        )  # fmt: skip
        assert guard.returncode == expected
    os.close(read_end)
    os.close(write_end)


def test_launcher_settings_are_one_line_each():
    settings.check({"kill_after_s": 5, "share_devices": True, "lease_dir": "/tmp/x"})
    with pytest.raises(ConfigError, match=r"hydra.launcher.kill_afters: not a setting .* keys "
                       r"are devices, per_device, .*kill_after_s, share_devices, lease_dir"):  # fmt: skip
        settings.check({"kill_afters": 5})
    with pytest.raises(ConfigError, match=r"kill_after_s=0: give the seconds a trial has"):
        settings.check({"kill_after_s": 0})
    with pytest.raises(ConfigError, match=r"share_devices=yes: give true"):
        settings.check({"share_devices": "yes"})
    with pytest.raises(ConfigError, match=r"devices=\[0, 0\]: give auto"):
        settings.check({"devices": [0, 0]})


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("+hydra.launcher.kill_afters=1", "hydra.launcher.kill_afters: not a setting"),
        ("trainer.devices=3", "trainer.devices=3 in job #0, but hydra.launcher.devices has 2"),
    ],
)
def test_a_bad_launcher_input_under_optuna_is_one_line_with_no_retry_said(tmp_path, override, says):
    # The first is refused when the launcher is set up (no trial asked), the second when
    # a batch is launched (its trials are config errors, not interrupted ones).
    code, out = finish(plain_sweep(
        tmp_path, "hydra/sweeper=litforge_optuna", "hydra.sweeper.n_trials=2",
        "hydra.sweeper.n_jobs=2", "hydra.launcher.devices=[0,1]", override,
    ))  # fmt: skip
    assert code == 2, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], out
    assert "interrupted" not in out and "retried" not in out and "Traceback" not in out, out
    assert jobs_seen(tmp_path) == []


def test_a_failing_trial_under_the_basic_sweeper_is_one_line(tmp_path):
    code, out = finish(plain_sweep(tmp_path, "hydra.launcher.devices=[0,1]", "x=1,2", "exit_on=2"))
    assert code == 1, out[-3000:]
    assert "Traceback" not in out and "TrialProcessDied(" not in out, out[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: trial job #1 (x=2 exit_on=2) failed: TrialProcessDied: "), out
    assert "Error executing job" not in out
    assert "exit status 3" in last and str(tmp_path / "1" / "launcher.log") in last


def _task(cfg):  # a task function no module-level function runs
    return 0.0


def test_a_sweep_started_in_process_runs_the_apps_own_module():
    from hydra_plugins.litforge_optuna.optuna_sweeper import _run_trial

    command = entry_command(functools.partial(_run_trial, app.main.__wrapped__))
    assert command[1] == "-c" and command[3:6] == [str(ROOT), app.__name__, "main"]
    with pytest.raises(ConfigError, match=r"not by the app's own script, and no module .*_task"):
        entry_command(_task)


def test_a_pool_sweep_called_from_pytest_runs_its_trials(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [
        "app.py", "-m", f"hydra.sweep.dir={tmp_path}", f"hydra.launcher.lease_dir={tmp_path}/l",
        "hydra.launcher.devices=[0]", "x=3",
    ])  # fmt: skip
    GlobalHydra.instance().clear()
    try:
        app.main()
    finally:
        GlobalHydra.instance().clear()
    seen = jobs_seen(tmp_path)
    assert len(seen) == 1 and "end" in seen[0]
    assert (tmp_path / ".launcher" / "job0.json").read_text().count('"completed"') == 1
