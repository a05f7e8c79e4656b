"""litforge's Optuna sweeper under `hydra/launcher=gpus`, trial by trial: a trial is asked and
started the moment a device frees (pruned trials free theirs at once), never on a device
another trial of this sweep holds (of another sweep: test_device_leases); two pools on one
journal study run each trial once; kill -9 loses no finished trial and the same command
resumes.

The trials are the plain Hydra app of tests/sweeps/pool_app (it sleeps, or waits for a
file): the checks read the order of events (the sweep's own lines, the trials' records),
never how long something took."""

from __future__ import annotations

import csv
import signal
import time
from pathlib import Path

import optuna
import pytest

from tests.sweeps.test_gpu_pool import _alive, finish, jobs_seen, overlapping, plain_sweep

OPTUNA = ("hydra/sweeper=litforge_optuna", "hydra.sweeper.pruner=none")


def _wait_for(check, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)
    return check()


def _rows(sweep_dir: Path) -> list[dict[str, str]]:
    with open(sweep_dir / "trials.csv", newline="") as table:
        return list(csv.DictReader(table))


def _study(journal: Path, name: str = "app") -> optuna.Study:
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))
    )
    return optuna.load_study(study_name=name, storage=storage)


def test_a_trial_starts_the_moment_a_device_frees_and_no_two_share_one(tmp_path):
    # 8 trials on 4 devices, each running until the test opens its gate. One gate at a
    # time: the next trial must start on the freed device while the other three still run
    # (with batches of 4 it would wait for all of them, forever).
    sweep_dir, gates = tmp_path / "sweep", tmp_path / "gates"
    gates.mkdir()
    process = plain_sweep(
        sweep_dir, "hydra.launcher.devices=[0,1,2,3]", *OPTUNA, "hydra.sweeper.n_trials=8",
        "hydra.sweeper.n_jobs=4", "hydra.sweeper.sampler=grid", "x=choice(1,2,3,4,5,6,7,8)",
        f"gates={gates}",
    )  # fmt: skip
    running = lambda: {s["num"]: s for s in jobs_seen(sweep_dir) if "end" not in s}  # noqa: E731
    try:
        assert _wait_for(lambda: len(running()) == 4), process.pid
        for release in (2, 0, 3, 1):  # an order other than the trials' own
            before = running()
            (gates / str(release)).touch()
            assert _wait_for(lambda: set(running()) - set(before)), (release, before)  # noqa: B023
            now = running()
            (started,) = set(now) - set(before)
            assert set(now) == set(before) - {release} | {started}  # the others still run
            assert now[started]["devices"] == before[release]["devices"]  # the freed one
        for number in range(8):
            (gates / str(number)).touch()
        code, out = finish(process)
    finally:
        process.kill()
    assert code == 0, out[-3000:]
    seen = jobs_seen(sweep_dir)
    assert sorted(s["num"] for s in seen) == list(range(8))
    for job in seen:
        for other in seen:
            if other is not job and overlapping(job, other):
                assert job["devices"] != other["devices"], (job, other)
    rows = _rows(sweep_dir)
    assert sorted(int(r["number"]) for r in rows) == list(range(8))
    assert {r["state"] for r in rows} == {"COMPLETE"}
    assert sorted(float(r["x"]) for r in rows) == [1, 2, 3, 4, 5, 6, 7, 8]  # each point once


def test_pruned_trials_free_their_device_at_once(tmp_path):
    # x=1 runs until the test opens its gate; x >= 3 report x*x > 2 at step 0 and are
    # pruned. On 2 devices every pruned trial starts and ends while x=1 still runs: a
    # batch of two would hold the pruned trial's device until x=1 ended.
    gate = tmp_path / "open"
    process = plain_sweep(
        tmp_path / "sweep", "hydra.launcher.devices=[0,1]", "hydra/sweeper=litforge_optuna",
        "+hydra.sweeper.pruner._target_=optuna.pruners.ThresholdPruner",
        "+hydra.sweeper.pruner.upper=2", "hydra.sweeper.n_trials=5", "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.sampler=grid", "x=choice(1,3,4,5,6)", "prune=true", f"hold={gate}",
    )  # fmt: skip
    pruned = lambda: [s for s in jobs_seen(tmp_path / "sweep") if s.get("pruned")]  # noqa: E731
    _wait_for(lambda: len(pruned()) == 4, timeout=240)
    gate.touch()
    code, out = finish(process)
    assert code == 0, out[-3000:]
    assert len(pruned()) == 4, out[-3000:]
    long = next(s for s in jobs_seen(tmp_path / "sweep") if not s.get("pruned"))
    assert all(p["end"] < long["end"] for p in pruned())
    states = {float(r["x"]): r["state"] for r in _rows(tmp_path / "sweep")}
    assert states == {1.0: "COMPLETE", 3.0: "PRUNED", 4.0: "PRUNED", 5.0: "PRUNED", 6.0: "PRUNED"}


def test_two_pools_on_one_journal_study_run_each_trial_once(tmp_path):
    # Two "machines": their own sweep directories, devices and seeds, one journal study, the
    # same command otherwise.
    journal = tmp_path / "shared" / "study.journal"
    journal.parent.mkdir()
    common = (
        *OPTUNA, f"hydra.sweeper.storage={journal}", "hydra.sweeper.study_name=shared",
        "hydra.sweeper.n_trials=10", "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler=random",
        "x=interval(0, 2)", "sleep=0.2", "hydra.sweeper.stale_s=8",
    )  # fmt: skip
    workers = [
        plain_sweep(tmp_path / name, f"hydra.launcher.devices={devices}", seed, *common)
        for name, devices, seed in (
            ("m1", "[0,1]", "hydra.sweeper.seed=1"),
            ("m2", "[2,3]", "hydra.sweeper.seed=2"),
        )
    ]
    for worker in workers:
        code, out = finish(worker)
        assert code == 0, out[-3000:]
    study = _study(journal, "shared")
    complete = [t.number for t in study.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 10  # none lost, none extra
    for trial in study.trials:  # but one asked by both at the same moment, never run
        if trial.number not in complete:
            assert trial.system_attrs.get("litforge:not_counted") == "surplus", trial
    ran = {}  # each trial's job ran once, on its machine's devices, in its own directory
    for name, devices in (("m1", {"0", "1"}), ("m2", {"2", "3"})):
        for job in jobs_seen(tmp_path / name):
            assert job["num"] not in ran and job["devices"] in devices
            ran[job["num"]] = name
    assert sorted(ran) == complete
    assert {ran[n] for n in ran} == {"m1", "m2"}
    for name in ("m1", "m2"):
        rows = _rows(tmp_path / name)  # the study as each machine last saw it
        numbers = [int(r["number"]) for r in rows]
        assert len(numbers) == len(set(numbers))
        for row in rows:
            trial = study.trials[int(row["number"])]
            assert float(row["x"]) == trial.params["x"]
            if row["state"] == "COMPLETE":
                assert float(row["value"]) == trial.value
                assert Path(row["run_dir"]).parent.name == ran[trial.number]


# Slow: three sweeps. make test covers kill -9 leaving no trial process
# (test_gpu_pool) and SIGTERM through the trial-by-trial pool (test_pool_lifecycle's Optuna
# case); the slow tier's digits sweeps resume each trial from its checkpoint.
@pytest.mark.slow
def test_kill_9_mid_sweep_loses_no_finished_trial_and_the_same_command_resumes(tmp_path):
    sweep_dir, gate = tmp_path / "sweep", tmp_path / "open"
    common = (
        "hydra.launcher.devices=[0,1]", *OPTUNA, "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.sampler=grid", "x=choice(0,1,2,3)", "hydra.launcher.kill_after_s=2",
    )  # fmt: skip
    code, out = finish(plain_sweep(sweep_dir, *common, "hydra.sweeper.n_trials=1"))
    assert code == 0, out[-3000:]
    args = (*common, "hydra.sweeper.n_trials=4", f"hold={gate}")
    process = plain_sweep(sweep_dir, *args)  # two trials wait at the gate: killed there
    assert _wait_for(lambda: len(jobs_seen(sweep_dir)) == 3), process.pid
    pids = [s["pid"] for s in jobs_seen(sweep_dir) if "end" not in s]
    assert len(pids) == 2
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert _wait_for(lambda: not any(_alive(p) for p in pids), timeout=60), pids
    gate.touch()
    code, out = finish(plain_sweep(sweep_dir, *args))  # the same command
    assert code == 0, out[-3000:]
    study = _study(sweep_dir / "optuna.journal")
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert sorted(t.params["x"] for t in complete) == [0, 1, 2, 3]
    assert complete[0].number == 0  # the finished one kept, not run again
    assert "trial job #0 " not in out
    # The two trials running at the kill are retried, each in its own directory.
    retried = [t for t in complete if "litforge:retry_of" in t.system_attrs]
    assert len(retried) == 2, (sweep_dir / "trials.csv").read_text()
    for trial in retried:
        first = trial.system_attrs["litforge:retry_of"]
        assert Path(trial.user_attrs["litforge:run_dir"]).name == str(first) and first in (1, 2)
    assert not any(_alive(p) for p in pids)
