"""litforge's Optuna sweeper under `hydra/launcher=gpus`, trial by trial: a trial is asked and
started the moment a device frees (pruned trials free theirs at once), never on a device
another trial of this or another sweep holds; two pools on one journal study run each
trial once; kill -9 loses no finished trial and the same command resumes.

The trials are the plain Hydra app of tests/sweeps/pool_app (it sleeps, or waits for a
file): the checks read the order of events (the sweep's own lines, the trials' records),
never how long something took."""

from __future__ import annotations

import csv
import signal
import time
from pathlib import Path

import optuna

from tests.sweeps.test_gpu_pool import _alive, finish, jobs_seen, overlapping, plain_sweep

OPTUNA = ("hydra/sweeper=litforge_optuna", "hydra.sweeper.pruner=none")


def _events(out: str) -> list[tuple[str, int]]:
    """The sweep's lines for trial starts and ends, in order: ('start'|'end', job number)."""
    found = []
    for line in out.splitlines():
        if "] trial job #" not in line:
            continue
        number = int(line.split("trial job #", 1)[1].split()[0])
        if " started on device" in line:
            found.append(("start", number))
        elif " finished: " in line or " ended: " in line:
            found.append(("end", number))
    return found


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
    # 8 trials of 0.4 to 2.5 s on 4 devices: with batches of 4, a short trial's device would
    # stay idle until the longest of its batch ends.
    code, out = finish(plain_sweep(
        tmp_path, "hydra.launcher.devices=[0,1,2,3]", *OPTUNA, "hydra.sweeper.n_trials=8",
        "hydra.sweeper.n_jobs=4", "hydra.sweeper.sampler=grid",
        "x=choice(1,2,3,4,5,6,7,8)", "sleep=0.1", "sleep_x=0.3",
    ))  # fmt: skip
    assert code == 0, out[-3000:]
    events = _events(out)
    assert sorted(n for kind, n in events if kind == "start") == list(range(8))
    running, ended = set(), 0
    for i, (kind, number) in enumerate(events):
        if kind == "start":
            running.add(number)
            continue
        # The first end of each group the pool collected together: every device that freed
        # before it had its next trial already (none waited while a device was free).
        if events[i - 1][0] == "start":
            assert len(running) == min(4, 8 - ended), (i, events)
        running.discard(number)
        ended += 1
    seen = jobs_seen(tmp_path)
    assert len(seen) == 8
    for job in seen:
        for other in seen:
            if other is not job and overlapping(job, other):
                assert job["devices"] != other["devices"], (job, other)
    rows = _rows(tmp_path)
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


def test_two_sweeps_trial_by_trial_never_share_a_device_and_a_waiting_one_says_so_once(
    tmp_path,
):
    leases, gate = tmp_path / "leases", tmp_path / "go"
    first = plain_sweep(
        tmp_path / "a", "hydra.launcher.devices=[0,1]", *OPTUNA, "hydra.sweeper.n_trials=2",
        "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler=grid", "x=choice(1,2)",
        f"hold={gate}", leases=leases,
    )  # fmt: skip
    assert _wait_for(lambda: len(jobs_seen(tmp_path / "a")) == 2), first.pid
    second = plain_sweep(
        tmp_path / "b", "hydra.launcher.devices=[1,2]", *OPTUNA, "hydra.sweeper.n_trials=3",
        "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler=grid", "x=choice(3,4,5)",
        leases=leases,
    )  # fmt: skip
    said = []
    while not any(" waits: " in line for line in said) and second.poll() is None:
        said.append(second.stdout.readline())
    gate.touch()
    (code_a, out_a), (code_b, out_b) = finish(first), finish(second)
    out_b = "".join(said) + out_b
    assert code_a == 0 and code_b == 0, out_a[-2000:] + out_b[-2000:]
    runs = jobs_seen(tmp_path / "a") + jobs_seen(tmp_path / "b")
    assert len(runs) == 5
    for run in runs:
        for other in runs:
            if other is not run and run["devices"] == other["devices"]:
                assert not overlapping(run, other), (run, other)
    waits = [line for line in out_b.splitlines() if " waits: " in line]
    assert len(waits) == 1, out_b
    assert f"the next trial waits: device(s) [1] are in use by pid {first.pid}" in waits[0]


def test_two_pools_on_one_journal_study_run_each_trial_once(tmp_path):
    # Two "machines": their own sweep directories and devices, one journal study.
    journal = tmp_path / "shared" / "study.journal"
    journal.parent.mkdir()
    workers = [
        plain_sweep(
            tmp_path / name,
            f"hydra.launcher.devices={devices}",
            *OPTUNA,
            f"hydra.sweeper.storage={journal}",
            "hydra.sweeper.study_name=shared",
            "hydra.sweeper.n_trials=10",
            "hydra.sweeper.n_jobs=2",
            f"hydra.sweeper.seed={seed}",
            "hydra.sweeper.sampler=random",
            "x=interval(0, 2)",
            "sleep=0.2",
            "hydra.sweeper.stale_s=8",
        )  # fmt: skip
        for name, devices, seed in (("m1", "[0,1]", 1), ("m2", "[2,3]", 2))
    ]
    for worker in workers:
        code, out = finish(worker)
        assert code == 0, out[-3000:]
    study = _study(journal, "shared")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 10  # none lost, none extra
    ran = {}  # each trial's job ran once, on its machine's devices, in its own directory
    for name, devices in (("m1", {"0", "1"}), ("m2", {"2", "3"})):
        for job in jobs_seen(tmp_path / name):
            assert job["num"] not in ran and job["devices"] in devices
            ran[job["num"]] = name
    assert sorted(ran) == list(range(10))
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
