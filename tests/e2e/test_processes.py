"""The processes of a run (litforge.launch.processes): how many start, that none outlives its
launcher, that a rendezvous nobody joins ends, and that DDP ranks end their process group."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from litforge import build
from litforge.errors import ConfigError
from litforge.launch import processes
from tests.helpers import ROOT, run_entry

CORES = processes.available_cores()


class HoldRankOne(L.Callback):
    """Rank 1 touches `ready`, then stays busy, as it would preparing a large dataset."""

    def __init__(self, ready: str) -> None:
        self.ready = Path(ready)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.global_rank == 1:
            self.ready.touch()
            time.sleep(120)


class ReportProcessGroupAtExit(L.Callback):
    """Says at exit whether the process group is still there.

    Registered before the Trainer starts, so it runs after any exit handler the run adds.
    """

    def __init__(self) -> None:
        atexit.register(self._report)

    @staticmethod
    def _report() -> None:
        state = "alive" if torch.distributed.is_initialized() else "destroyed"
        # One write(2) call: both ranks share the pipe, and print() writes the text and
        # the newline separately, so two ranks' lines could interleave.
        os.write(2, f"process group at exit: {state}\n".encode())


# 8: no more processes than the machine has cores (CPU) or visible GPUs.


TOO_MANY = processes.CPU_PROCESSES_PER_CORE * CORES + 1


@pytest.mark.parametrize("devices", [TOO_MANY, str(TOO_MANY)])
def test_more_cpu_processes_than_four_per_core_are_refused_with_the_limit(devices):
    with pytest.raises(ConfigError) as err:
        processes.check_device_count(devices, on_gpu=False)
    assert f"trainer.devices={devices} starts {int(devices)} processes" in str(err.value)
    assert f"has {CORES} CPU cores" in str(err.value)
    assert "processes.oversubscribe=true" in str(err.value)


@pytest.mark.parametrize(
    ("devices", "processes_started"),
    [(1, 1), (str(CORES), CORES), ("auto", 1), (-1, 1), ([0, 1], 1), ("0,1", 1)],
)
def test_cpu_device_forms_count_processes(devices, processes_started):
    # Lists, '0,1' and -1 are GPU forms that Lightning itself refuses on CPU.
    assert processes.check_device_count(devices, on_gpu=False) == processes_started


def test_oversubscribing_cpu_is_allowed_when_asked():
    assert processes.check_device_count(TOO_MANY, on_gpu=False, oversubscribe=True) == TOO_MANY


def test_up_to_four_processes_a_core_start_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, "litforge"):
        assert processes.check_device_count(2 * CORES, on_gpu=False) == 2 * CORES
    assert [r.getMessage() for r in caplog.records] == [
        f"trainer.devices={2 * CORES} starts {2 * CORES} processes on {CORES} CPU cores: each "
        "step takes about 2x as long as with one process per core (fine for trying DDP)"
    ]


@pytest.mark.skipif(torch.cuda.is_available(), reason="counts GPUs on a machine without one")
@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (1, "trainer.devices=1 asks for 1 GPUs, but none are visible"),
        ([0, 1], "trainer.devices=[0, 1] names GPU ids [0, 1], but no GPU is visible"),
        ("0,1", "trainer.devices=0,1 names GPU ids [0, 1], but no GPU is visible"),
    ],
)
def test_more_gpus_than_visible_are_refused(devices, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        processes.check_device_count(devices, on_gpu=True)


def test_build_trainer_refuses_more_processes_than_cores(make_cfg, monkeypatch):
    monkeypatch.setenv(processes.LAUNCHER_PID, "0")  # restored after the test
    with pytest.raises(ConfigError, match=f"has {CORES} CPU cores"):
        build.build_trainer(make_cfg("trainer=cpu", f"trainer.devices={TOO_MANY}"))
    trainer = build.build_trainer(
        make_cfg("trainer=cpu", f"trainer.devices={TOO_MANY}", "processes.oversubscribe=true")
    )
    assert isinstance(trainer.strategy, processes.BoundedDDPStrategy)
    assert trainer.num_devices == TOO_MANY


def test_too_many_devices_fail_in_one_line_before_any_rank_starts(tmp_path):
    # One past the limit: were the check to fail, this starts a few ranks, not 99.
    started = time.monotonic()
    result = run_entry("train.py", f"trainer.devices={TOO_MANY}", run_dir=tmp_path, timeout=60)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: trainer.devices={TOO_MANY} starts {TOO_MANY} processes, but this machine has "
        f"{CORES} CPU cores for them (up to 4 per core start, slowly); use "
        f"trainer.devices={TOO_MANY - 1} or fewer (processes.oversubscribe=true starts them anyway)"
    ]
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 60


# 9: a rank that Lightning's launcher started ends when the launcher dies.


def _children(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        if int(fields[1]) == pid and fields[0] not in "ZX":
            found.append(int(stat.parent.name))
    return found


def _ranks_of(pid: int) -> list[int]:
    """The children of `pid` that run train.py."""
    found = []
    for child in _children(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"train.py") for arg in argv):
            found.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in "ZX"  # a zombie has ended; only its exit status is left


def _wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


def _start_ddp(tmp_path: Path, *args: str) -> subprocess.Popen:
    """`python train.py trainer.devices=2 ...` in its own session (so cleanup reaches all)."""
    dropped = (processes.LAUNCHER_PID, "HYDRA_FULL_ERROR")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.Popen(
        [sys.executable, "train.py", "trainer=cpu", "trainer.devices=2", "debug=limit",
         "trainer.max_epochs=50", *args, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT, env={**env, "CI": "1"}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _kill_session(launcher: subprocess.Popen, ranks: list[int]) -> None:
    for pid in ranks:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    if launcher.poll() is None:
        os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait(timeout=30)


# Slow for CI time; make test covers it by a rank ending with its launcher: test_rank_starting_up_stops_when_its_launcher_is_gone.
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_busy_rank_dies_with_its_launcher(tmp_path):
    ready = tmp_path / "rank1-ready"
    launcher = _start_ddp(
        tmp_path, "+callbacks.hold._target_=tests.e2e.test_processes.HoldRankOne",
        f"+callbacks.hold.ready={ready}",
    )  # fmt: skip
    ranks: list[int] = []
    try:
        assert _wait_for(ready.exists, 90), "rank 1 never got going"
        ranks = _children(launcher.pid)
        assert len(ranks) == 1
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        assert _wait_for(lambda: not _alive(ranks[0]), 5), "rank 1 outlived its launcher"
    finally:
        _kill_session(launcher, ranks)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_rank_starting_up_stops_when_its_launcher_is_gone(tmp_path):
    # The launcher dies while the rank is still importing: it notices before the rendezvous
    # (which would otherwise wait for the launcher's store for 30 minutes).
    launcher = _start_ddp(tmp_path)
    ranks: list[int] = []
    try:
        # The rank is the child running train.py again (Lightning re-executes argv); read
        # once: a second look may miss it, and another child (a helper the launcher runs
        # and that exits at once) is not the rank.
        def rank_started() -> bool:
            ranks[:] = _ranks_of(launcher.pid)
            return bool(ranks)

        assert _wait_for(rank_started, 90), "no rank started"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        assert _wait_for(lambda: not _alive(ranks[0]), 60), "rank 1 outlived its launcher"
        stderr = launcher.stderr.read()  # the rank wrote to the same pipe
        assert f"error: the launching process (pid {launcher.pid}) has exited" in stderr
    finally:
        _kill_session(launcher, ranks)


# 10: a rendezvous that the other nodes never join says what it waits for, then ends.


def test_missing_node_ends_the_wait_in_one_line(tmp_path):
    started = time.monotonic()
    result = run_entry(
        "train.py", "trainer.num_nodes=2", "trainer.devices=1", "trainer.accelerator=cpu",
        "processes.rendezvous_timeout_s=3", run_dir=tmp_path, timeout=90,
    )  # fmt: skip
    assert result.returncode == 1
    assert time.monotonic() - started < 90
    waits = [line for line in result.stdout.splitlines() if "node 0: waiting up to 3 s" in line]
    assert len(waits) == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].startswith(
        "error: gave up after 3 s waiting for 2 processes (trainer.num_nodes=2 x 1 per node) "
        "at MASTER_ADDR:MASTER_PORT=127.0.0.1:"
    )
    assert "NODE_RANK=1" in errors[0]
    assert "Traceback" not in result.stderr
    # Nothing was trained: no run directory, and so no stale lock, is left behind.
    assert not tmp_path.exists(), sorted(str(p) for p in tmp_path.rglob("*"))


# 11: each DDP rank destroys its process group before the interpreter shuts down.


# Slow for CI time; make test covers it by DDP runs ending cleanly: every DDP test's exit status.
@pytest.mark.slow
def test_ddp_ranks_end_their_process_group_before_exit(tmp_path):
    result = run_entry(
        "train.py", "trainer=cpu", "trainer.devices=2", "debug=limit",
        "+callbacks.report._target_=tests.e2e.test_processes.ReportProcessGroupAtExit",
        run_dir=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [line for line in result.stderr.splitlines() if "process group at exit" in line]
    assert reports == ["process group at exit: destroyed"] * 2  # both ranks
    assert "terminate called" not in result.stderr
