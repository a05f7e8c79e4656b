"""Two runs with the same run_name at once (issue 9.4): the second stops, naming the first."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import fsspec
import lightning as L
import pytest

from litforge.checkpointing.lock import RunLock, RunLocked
from tests.helpers import ROOT


def lock_at(tmp_path, **kwargs) -> RunLock:
    return RunLock(fsspec.filesystem("file"), str(tmp_path / ".litforge-lock"), "here", **kwargs)


def plant(tmp_path, host: str, pid: int, age_s: float) -> None:
    record = {"host": host, "pid": pid, "token": "theirs", "heartbeat": time.time() - age_s}
    (tmp_path / ".litforge-lock").write_text(json.dumps(record))


def test_a_live_holder_keeps_the_lock_and_is_named(tmp_path):
    parent = os.getppid()  # alive, on this host, not us
    plant(tmp_path, socket.gethostname(), parent, age_s=1)
    with pytest.raises(RunLocked, match=rf"in use by host {socket.gethostname()} pid {parent}"):
        lock_at(tmp_path).acquire()


@pytest.mark.parametrize(
    ("host", "pid", "age_s"),
    [("this", 2**22 + 7, 1), ("elsewhere", 1, 500)],  # a dead pid here; a stale heartbeat there
)
def test_a_lock_whose_holder_is_gone_is_taken_over(tmp_path, host, pid, age_s):
    plant(tmp_path, socket.gethostname() if host == "this" else host, pid, age_s)
    lock = lock_at(tmp_path, stale_s=120)
    lock.acquire()
    assert json.loads((tmp_path / ".litforge-lock").read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / ".litforge-lock").exists()


def test_locks_a_gone_run_left_are_taken_over_with_one_true_line(tmp_path, caplog):
    """The store's and the run directory's locks name the same dead process: one line says
    it is gone and both are taken over, and nothing says it is still going."""
    from litforge.checkpointing.lock import acquire_all

    dirs = [tmp_path / "store", tmp_path / "run"]
    for where in dirs:
        where.mkdir()
        plant(where, socket.gethostname(), 2**22 + 7, age_s=1)
    locks = [RunLock(fsspec.filesystem("file"), str(d / ".litforge-lock"), str(d)) for d in dirs]
    with caplog.at_level("WARNING", logger="litforge"):
        acquire_all(locks)
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1, said
    assert "is gone" in said[0] and f"{dirs[0]} and {dirs[1]}" in said[0]
    assert "still going" not in said[0] and "Wait" not in said[0]
    for lock in locks:
        lock.release()


def test_a_fresh_holder_on_another_host_keeps_the_lock(tmp_path):
    plant(tmp_path, "another-host", 1, age_s=5)
    with pytest.raises(RunLocked, match="another-host"):
        lock_at(tmp_path).acquire()


def test_the_heartbeat_renews_the_lock(tmp_path):
    lock = lock_at(tmp_path, heartbeat_s=0.05)
    lock.acquire()
    first = json.loads((tmp_path / ".litforge-lock").read_text())["heartbeat"]
    time.sleep(0.3)
    assert json.loads((tmp_path / ".litforge-lock").read_text())["heartbeat"] > first
    lock.release()


@pytest.mark.slow  # two real runs side by side, ~40 s: CI time; the lock's units stay fast
def test_a_second_run_with_the_same_name_stops_with_one_line(tmp_path):
    # Long enough that the first run is still training when the second has started up
    # (imports and all, ~7 s here) and reaches the lock: 200 steps were a race.
    args = ["run_name=twice", f"checkpoint.dir={tmp_path / 'store'}", "trainer.max_steps=1500",
            "trainer.max_epochs=-1", "checkpoint.every_n_train_steps=5", "test=false"]  # fmt: skip
    env = {**os.environ, "CI": "1", "PYTHONUNBUFFERED": "1"}

    def start(run_dir):
        command = [sys.executable, "train.py", *args, f"hydra.run.dir={run_dir}"]
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip

    first = start(tmp_path / "a")
    marker = tmp_path / "store" / "twice" / "step-00000005.ckpt.complete"
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
        time.sleep(0.05)
    second = start(tmp_path / "b")
    _, err = second.communicate(timeout=120)
    assert second.returncode == 75, err[-3000:]
    assert f"in use by host {socket.gethostname()} pid {first.pid}" in err
    assert len(err[err.index("error: ") :].strip().splitlines()) == 1
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    assert not (tmp_path / "store" / "twice" / ".litforge-lock").exists()  # released at the end


class RaiseAtStep(L.Callback):
    """A bug in user code: raises inside fit once `step` optimizer steps are done."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("boom")


def test_a_fit_that_raised_releases_the_runs_locks_at_once(make_cfg, tmp_path):
    """Not only at exit: a notebook's kernel lives on, and another process may take the run."""
    from litforge.checkpointing.lock import LOCK_NAME
    from litforge.training import train

    boom = ["+callbacks.boom._target_=tests.checkpointing.test_lock.RaiseAtStep",
            "+callbacks.boom.step=2"]  # fmt: skip
    with pytest.raises(RuntimeError, match="boom"):
        train(make_cfg("debug=limit", "checkpoint.dir=" + str(tmp_path / "store"), *boom))
    assert not (tmp_path / "run" / LOCK_NAME).exists()
    assert not list((tmp_path / "store").rglob(LOCK_NAME))


def test_a_heartbeat_during_a_checkpoint_save_lands_at_once(tmp_path):
    """Lightning saves inside `fs.transaction` of the same cached filesystem the lock beats
    on: a beat then must not wait for (or fail) the checkpoint's commit."""
    fs = fsspec.filesystem("file")
    lock = lock_at(tmp_path)
    gone = tmp_path / "gone"
    with pytest.raises(OSError), fs.transaction:
        lock._write()  # what the heartbeat thread does, mid-save
        assert json.loads((tmp_path / ".litforge-lock").read_text())["token"] == lock.token
        lock_at(gone)._write()  # a lock whose directory is removed before the commit
        (gone / ".litforge-lock").unlink()
        gone.rmdir()
        raise OSError("the save failed")
    assert (tmp_path / ".litforge-lock").is_file()  # kept, though the transaction failed
    with fs.transaction:  # and a later save commits nothing of the lock's
        fs.pipe_file(str(tmp_path / "step.ckpt"), b"weights")
    assert (tmp_path / "step.ckpt").read_bytes() == b"weights"
