"""`hydra/launcher=gpus` on CPU with a device list: trials as processes of their own, each
on its own devices, side by side; failures, signals and kills handled per trial."""

from __future__ import annotations

import csv
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from litforge.errors import ConfigError
from litforge.launch.processes import available_cores
from litforge.sweeps.pool import devices as pool_devices
from litforge.sweeps.pool.capacity import Capacity
from litforge.sweeps.pool.launcher import check_settings
from tests.helpers import ROOT

APP = ROOT / "tests" / "sweeps" / "pool_app" / "app.py"


def plain_sweep(sweep_dir: Path, *args: str, leases: Path | None = None) -> subprocess.Popen:
    """The plain Hydra app's sweep (tests/sweeps/pool_app) into sweep_dir, its device leases
    in `leases` (default: the sweep's own, so that tests side by side do not wait for each
    other's fake CPU devices)."""
    lease_dir = leases or sweep_dir / ".leases"
    return subprocess.Popen(
        [sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep_dir}",
         f"hydra.launcher.lease_dir={lease_dir}", *args],
        cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out


def jobs_seen(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/job.json"))]


def overlapping(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_eight_trials_on_four_devices_run_four_at_a_time_each_on_its_own(tmp_path):
    code, out = finish(plain_sweep(
        tmp_path, "hydra.launcher.devices=[0,1,2,3]", "x=1,2,3,4,5,6,7,8", "sleep=1.5"
    ))  # fmt: skip
    assert code == 0, out[-3000:]
    seen = jobs_seen(tmp_path)
    assert len(seen) == 8 and all("end" in s for s in seen)
    for job in seen:  # at most 4 at once, and no two at once on one device
        at_once = [o for o in seen if overlapping(job, o)]
        assert len(at_once) <= 4
        ids = [o["devices"] for o in at_once]
        assert len(ids) == len(set(ids)), at_once
        assert job["cuda_visible_devices"] == job["devices"] and job["devices"] in "0123"
    assert max(len([o for o in seen if overlapping(j, o)]) for j in seen) >= 2  # side by side
    # CPU trials split the cores: one thread each for 4 devices on a machine this small
    assert {s["threads"] for s in seen} == {str(max(1, available_cores() // 4))}


def test_a_trial_with_two_devices_gets_two_ids_and_a_failing_trial_fails_alone(tmp_path):
    code, out = finish(plain_sweep(
        tmp_path, "hydra.launcher.devices=[0,1,2,3]", "trainer.devices=2",
        "hydra/sweeper=litforge_optuna", "hydra.sweeper.n_trials=3", "hydra.sweeper.n_jobs=3",
        "hydra.sweeper.sampler=grid",
        "fail_on=2", "sleep_x=1",
    ))  # fmt: skip
    assert code == 0, out[-3000:]
    seen = jobs_seen(tmp_path)
    assert sorted(len(s["devices"].split(",")) for s in seen) == [2, 2, 2]
    for job in seen:  # two trials of two at once on four devices, never sharing one
        for other in seen:
            if other is not job and overlapping(job, other):
                assert set(job["devices"].split(",")).isdisjoint(other["devices"].split(","))
    rows = (tmp_path / "trials.csv").read_text().splitlines()
    assert rows[0].split(",")[:3] == ["number", "state", "value"] and "devices" in rows[0]
    states = sorted(r.split(",")[1] for r in rows[1:])
    assert states == ["COMPLETE", "COMPLETE", "FAIL"], rows
    failed = next(r for r in rows[1:] if ",FAIL," in r)
    assert "RuntimeError: job with x=2 fails" in failed
    # Each trial's own time (it sleeps x seconds), not the whole batch's (x=3 starts last).
    took = {float(r["x"]): float(r["duration_s"]) for r in csv.DictReader(rows)}
    assert 1 <= took[1.0] < took[2.0] < took[3.0] and took[3.0] - took[1.0] >= 1.5, took


def test_kill_9_of_the_sweep_leaves_no_trial_process_behind(tmp_path):
    # Trial 0 ignores SIGTERM and has a child that does too; trial 1 waits in native code
    # with SIGTERM blocked. Neither stops on SIGTERM: kill_after_s later they are killed.
    process = plain_sweep(
        tmp_path, "hydra.launcher.devices=[0,1]", "x=1,2", "sleep=120", "stubborn_on=1",
        "blocked_on=2", "children=1", "hydra.launcher.kill_after_s=1",
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while len(jobs_seen(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    seen = jobs_seen(tmp_path)
    pids = [s["pid"] for s in seen] + [c for s in seen for c in s["children"]]
    assert len(pids) == 4
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids), pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = (
        Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}").exists() else "X"
    )
    return state not in ("Z", "X")  # a zombie has exited; its parent (gone) never reaped it


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("trainer.devices=3", "trainer.devices=3 in job #0, but hydra.launcher.devices has 2"),
        # Slow for CI time; make test covers these checks in-process (test_settings_are_checked,
        # test_a_device_that_is_not_visible_is_named_with_what_is) and the one-line path at
        # set-up with test_pool_lifecycle's test_an_unknown_launcher_key_is_one_line_...
        pytest.param(
            "hydra.launcher.per_device=2",
            "hydra.launcher.per_device=2: give 1",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "hydra.launcher.stagger_s=-1",
            "hydra.launcher.stagger_s=-1: give the seconds",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "hydra.launcher.devices=[0,0]",
            "hydra.launcher.devices=[0, 0]: give auto",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_bad_launcher_input_is_one_line_before_any_trial(tmp_path, override, says):
    code, out = finish(plain_sweep(tmp_path, "hydra.launcher.devices=[0,1]", override))
    assert code == 2 and f"error: {says}" in out, out[-3000:]
    assert "Traceback" not in out
    assert jobs_seen(tmp_path) == []


def test_a_device_that_is_not_visible_is_named_with_what_is():
    with pytest.raises(ConfigError, match=r"device 2 is not visible; this machine shows 2 GPU"):
        pool_devices.resolve([0, 2], visible=2)
    assert pool_devices.resolve("auto", visible=3) == [0, 1, 2]
    assert pool_devices.resolve([5, 7], visible=0) == [5, 7]  # CPU: a list is taken as given
    with pytest.raises(ConfigError, match=r"devices=\[0, 0\]: give auto .* distinct device ids"):
        pool_devices.resolve([0, 0], visible=0)


def test_a_trials_devices_go_through_the_sweeps_own_mask(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert pool_devices.cuda_mask([1, 3]) == "5,7"


def test_capacity_gives_distinct_devices_and_takes_them_back():
    pool = Capacity(dict.fromkeys([0, 1, 2], 1.0))
    assert pool.take(2, 1.0) == [0, 1]
    assert pool.take(2, 1.0) is None  # one device left
    pool.give_back([0, 1], 1.0)
    assert pool.take(3, 1.0) == [0, 1, 2]
    packed = Capacity({0: 10.0})  # per_device=auto: bytes
    assert packed.take(1, 4.0) == [0] and packed.take(1, 4.0) == [0] and packed.take(1, 4.0) is None


def test_the_sweep_process_names_launch_constants_without_loading_lightning():
    from litforge.launch import processes
    from litforge.sweeps.pool import launcher, trial_process

    assert trial_process.LAUNCHER_PID == processes.LAUNCHER_PID
    assert launcher._cores() == available_cores()


def test_settings_are_checked():
    check_settings({"per_device": "auto", "stagger_s": 0, "margin": 0.2})
    with pytest.raises(ConfigError, match="hydra.launcher.margin=1.5"):
        check_settings({"margin": 1.5})
    with pytest.raises(ConfigError, match="hydra.launcher.stagger_s=-1: give the seconds"):
        check_settings({"stagger_s": -1})


def digits_sweep(sweep_dir: Path, *args: str) -> subprocess.Popen:
    """A digits Optuna sweep of tiny trials (debug=limit) under hydra/launcher=gpus."""
    command = [
        sys.executable, "train.py", "-m", "hparams_search=digits_optuna", "debug=limit",
        "test=false", "hydra/launcher=gpus", "hydra.launcher.stagger_s=0",
        f"hydra.sweep.dir={sweep_dir}", f"hydra.launcher.lease_dir={sweep_dir}/.leases", *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, "CI": "1", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


# Slow for CI time: make test covers the launcher and its trials' processes under a signal
# in test_kill_9_of_the_sweep_leaves_no_trial_process_behind; the slow tier's kill -9 rerun
# also resumes each trial from its checkpoint.
@pytest.mark.slow
def test_sigterm_reaches_every_trial_and_the_rerun_resumes_each_from_its_checkpoint(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = (
        "hydra.launcher.devices=[0,1]", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
        "+callbacks.signal._target_=tests.sweeps.callbacks.SignalSweepWhenAllTrain",
        "+callbacks.signal.trials=2",
    )  # fmt: skip
    code, out = finish(digits_sweep(sweep_dir, *args), timeout=600)
    assert code == 128 + signal.SIGTERM, out[-3000:]
    for trial in ("0", "1"):  # each saved a checkpoint when the sweep passed the signal on
        log = (sweep_dir / trial / "train.log").read_text()
        assert "SIGTERM received: saving a checkpoint" in log, log[-2000:]

    code, out = finish(digits_sweep(sweep_dir, *args), timeout=600)
    assert code == 0, out[-3000:]
    import optuna

    study = optuna.load_study(
        study_name="digits_optuna", storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(sweep_dir / "optuna.journal"))
        ),
    )  # fmt: skip
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 2, (sweep_dir / "trials.csv").read_text() + out[-3000:]
    for trial in complete:  # retries continue their trial's directory
        run_dir = Path(trial.user_attrs["litforge:run_dir"])
        log = (run_dir / "train.log").read_text()
        assert log.count("starting fresh") == 1 and "resuming from" in log, log[-2000:]
        assert trial.intermediate_values  # the trial process reported to the study itself
        devices = json.loads((run_dir / "run.json").read_text())["devices"]["ids"]
        assert trial.user_attrs["litforge:devices"] == str(devices[0]) and devices[0] in (0, 1)


# Slow: two DDP trials of two processes each; make test covers device assignment with
# the plain app's trainer.devices=2 (test_a_trial_with_two_devices...) and DDP runs with
# tests/test_train.py's ddp cases.
@pytest.mark.slow
def test_trials_of_two_ddp_ranks_each_get_two_devices_and_run_two_ranks(tmp_path):
    sweep_dir = tmp_path / "sweep"
    code, out = finish(digits_sweep(
        sweep_dir, "hydra.launcher.devices=[0,1,2,3]", "hydra.sweeper.n_trials=2",
        "hydra.sweeper.n_jobs=2", "trainer.devices=2", "trainer.strategy=ddp",
        "hydra.sweeper.pruner=none",
    ), timeout=900)  # fmt: skip
    assert code == 0, out[-3000:]
    used = []
    for trial in ("0", "1"):
        output = (sweep_dir / trial / "launcher.log").read_text()
        assert "MEMBER: 2/2" in output, output[-3000:]  # rank 1 of this trial's own DDP
        used.append(json.loads((sweep_dir / trial / "run.json").read_text())["devices"]["ids"])
    assert all(len(ids) == 2 for ids in used) and set(used[0]).isdisjoint(used[1])


@pytest.mark.gpu
def test_per_device_auto_packs_small_trials_onto_one_card_within_its_memory(tmp_path):
    import torch

    sweep_dir = tmp_path / "sweep"
    code, out = finish(subprocess.Popen(
        [sys.executable, "train.py", "-m", "model.optimizer.lr=0.001,0.002,0.003,0.004",
         "hydra/launcher=gpus", "hydra.launcher.devices=[0]", "hydra.launcher.per_device=auto",
         "hydra.launcher.stagger_s=0", "trainer.accelerator=gpu", "trainer.max_epochs=20",
         "test=false", "+callbacks.peak._target_=tests.sweeps.callbacks.RecordPeakMemory",
         f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, env={**os.environ, "CI": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    ), timeout=900)  # fmt: skip
    assert code == 0, out[-3000:]
    assert "trial(s) per card" in out
    runs = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/peak.json"))]
    assert len(runs) == 4
    together = max(sum(1 for o in runs if overlapping(r, o)) for r in runs)
    assert together >= 2, runs
    usable = torch.cuda.mem_get_info(0)[0]
    assert sum(sorted(r["peak"] for r in runs)[-together:]) < usable


def test_trials_start_stagger_s_apart(tmp_path):
    code, out = finish(plain_sweep(
        tmp_path, "hydra.launcher.devices=[0,1]", "x=1,2", "sleep=1", "hydra.launcher.stagger_s=2"
    ))  # fmt: skip
    assert code == 0, out[-3000:]
    # The launcher's own start lines: a child's first line comes after its variable
    # start-up (imports), so the children's clocks would not show the launcher's spacing.
    stamps = [
        datetime.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for line in out.splitlines()
        if "started on device" in line
    ]
    assert len(stamps) == 2 and stamps[1] - stamps[0] >= 2.0 - 0.002, stamps


# Slow: two digits trials; make test covers a failing trial beside a completing one with the
# plain app (test_a_trial_with_two_devices_gets_two_ids_and_a_failing_trial_fails_alone).
@pytest.mark.slow
def test_a_trial_stopped_by_a_nan_fails_with_its_reason_and_the_other_completes(tmp_path):
    sweep_dir = tmp_path / "sweep"
    code, out = finish(subprocess.Popen(
        [sys.executable, "train.py", "-m", "debug=limit", "test=false", "hydra/launcher=gpus",
         "hydra.launcher.devices=[0,1]", "hydra.launcher.stagger_s=0",
         "+callbacks.poison._target_=tests.helpers.PoisonStep", "+callbacks.poison.step=1,1000",
         f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, env={**os.environ, "CI": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    ), timeout=600)  # fmt: skip
    assert code != 0  # Hydra's basic sweeper ends on a failed job, after the batch
    assert "trial job #0 ended: NumericsStop" in out or "ended: " in out, out[-3000:]
    assert (sweep_dir / "1" / "metrics.json").exists()  # the other trial trained to the end
    assert not (sweep_dir / "0" / "metrics.json").exists() or "nan" in out.lower()


# Slow: two sweeps of two digits trials; make test covers kill -9 leaving no process with
# the plain app, the SIGTERM rerun resuming each trial, and a killed worker's trial being
# retried with tests/sweeps/test_shared_study.py.
@pytest.mark.slow
def test_after_kill_9_of_the_sweep_the_rerun_resumes_each_trial_from_its_checkpoint(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = (
        "hydra.launcher.devices=[0,1]", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.stale_s=3", "hydra.sweeper.heartbeat_s=1", "hydra.sweeper.pruner=none",
        "+callbacks.signal._target_=tests.sweeps.callbacks.SignalSweepWhenAllTrain",
        "+callbacks.signal.trials=2", "+callbacks.signal.signum=9",
    )  # fmt: skip
    code, out = finish(digits_sweep(sweep_dir, *args), timeout=600)
    assert code == -9, out[-3000:]
    deadline = time.monotonic() + 60  # the orphaned trials checkpoint on their SIGTERM, exit
    logs = [sweep_dir / t / "train.log" for t in ("0", "1")]
    while time.monotonic() < deadline and not all(
        "saving a checkpoint" in p.read_text() for p in logs
    ):
        time.sleep(0.5)
    time.sleep(4)  # past stale_s: their leases, renewed by the dead sweep, are stale
    code, out = finish(digits_sweep(sweep_dir, *args), timeout=600)
    assert code == 0, out[-3000:]
    for log in logs:
        text = log.read_text()
        assert text.count("starting fresh") == 1 and "resuming from" in text, text[-2000:]


def test_a_trials_command_is_its_job_alone_with_a_checkpoint_key_of_its_own(tmp_path):
    from omegaconf import OmegaConf

    from litforge.sweeps.pool.trial_process import Job

    config = OmegaConf.create({
        "run_name": "mine",
        "hydra": {"overrides": {
            "task": ["run_name=mine", "model.optimizer.lr=0.01"],
            "hydra": ["hydra/launcher=gpus", "hydra.launcher.devices=[0,1]",
                      "hydra.sweeper.storage=/shared/s.journal", "hydra.sweep.subdir=3"],
        }},
    })  # fmt: skip
    argv = Job(3, [], config, tmp_path / "sweep" / "3", 1).command(tmp_path / "sweep")
    assert "model.optimizer.lr=0.01" in argv and "hydra.sweeper.storage=/shared/s.journal" in argv
    assert "hydra.mode=RUN" in argv and f"hydra.run.dir={tmp_path / 'sweep' / '3'}" in argv
    assert not any(
        a.startswith(("hydra/launcher", "hydra.launcher", "run_name=mine")) for a in argv[:-1]
    )
    assert argv[-1] == "run_name=mine-3"  # each trial's checkpoints under a key of its own
