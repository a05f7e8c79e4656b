"""Device leases of `hydra/launcher=gpus` across the sweeps of one machine: two sweeps
(batches, or trial by trial) never run trials on one device at once, a dead holder's lease is free, and a lease file
that someone else made into something else is one line, never a hang."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from litforge.errors import ConfigError
from litforge.sweeps.pool.leases import Leases
from tests.sweeps.test_gpu_pool import finish, jobs_seen, overlapping, plain_sweep

# litforge's Optuna sweeper hands the launcher one trial at a time: it says so before asking.
TRIALS = (
    "hydra/sweeper=litforge_optuna", "hydra.sweeper.pruner=none", "hydra.sweeper.n_trials=2",
    "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler=grid",
)  # fmt: skip


@pytest.mark.parametrize(
    ("first_args", "second_args", "waiting"),
    [
        (("x=1,2",), ("x=3,4",), "trial job #1 waits"),  # Hydra's basic sweeper: a batch
        pytest.param(
            (*TRIALS, "x=choice(1,2)"),
            (*TRIALS, "x=choice(3,4)"),
            "the next trial waits",
            id="trial-by-trial",
        ),
    ],
)
def test_two_sweeps_with_overlapping_devices_never_run_two_trials_on_one(
    tmp_path, first_args, second_args, waiting
):
    leases = tmp_path / "leases"
    gate = tmp_path / "go"  # the trials run until the second sweep waits
    first = plain_sweep(
        tmp_path / "a", "hydra.launcher.devices=[0,1]", *first_args, f"hold={gate}",
        leases=leases,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while len(jobs_seen(tmp_path / "a")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    second = plain_sweep(
        tmp_path / "b", "hydra.launcher.devices=[1,2]", *second_args, f"hold={gate}",
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
    assert len(runs) == 4 and {r["devices"] for r in runs} == {"0", "1", "2"}
    for run in runs:
        for other in runs:
            if other is not run and run["devices"] == other["devices"]:
                assert not overlapping(run, other), (run, other)
    waits = [line for line in out_b.splitlines() if " waits: " in line]
    assert len(waits) == 1, out_b  # said once, with who holds the device
    assert f"{waiting}: device(s) [1] are in use by pid {first.pid}" in waits[0], waits


def test_a_lease_is_held_by_one_and_free_once_its_holder_is_killed(tmp_path):
    mine, other = Leases(tmp_path), Leases(tmp_path)  # two locks, as two processes hold them
    assert mine.try_hold("0") and mine.try_hold("0") and not other.try_hold("0")
    assert other.holder("0").startswith(f"pid {os.getpid()}")
    mine.use(["0"])
    mine.done(["0"])  # its last trial there ended: let go
    assert other.try_hold("0")
    other.release_all()
    holder = subprocess.Popen([
        sys.executable, "-c", "import fcntl, os, sys, time; "
        f"fd = os.open({str(tmp_path / 'device-1.lock')!r}, os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)",
    ], stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    assert not mine.try_hold("1")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert mine.try_hold("1")  # the kernel let go of the dead holder's lock
    mine.release_all()


def test_a_lease_that_is_not_a_plain_file_is_one_line(tmp_path):
    (tmp_path / "elsewhere").write_text("")
    os.symlink(tmp_path / "elsewhere", tmp_path / "device-0.lock")
    os.mkfifo(tmp_path / "device-1.lock")  # opening a fifo would block: it must not
    (tmp_path / "device-2.lock").mkdir()
    leases = Leases(tmp_path)
    with pytest.raises(ConfigError, match=r"device-0.lock: cannot open this device lease \(a sym"):
        leases.try_hold("0")
    with pytest.raises(ConfigError, match=r"device-1.lock: not a plain file"):
        leases.try_hold("1")
    with pytest.raises(ConfigError, match=r"device-2.lock: cannot open this device lease"):
        leases.try_hold("2")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"lease_dir=.*file: not a directory"):
        Leases(tmp_path / "file").try_hold("0")
