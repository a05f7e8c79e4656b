"""One run directory whoever starts the processes: torchrun (one node, two "nodes"), srun."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest

from litforge.launch import launchers
from tests.checkpointing.test_resume_exact import (
    CNN,
    assert_bitwise_equal,
    assert_same_log,
    final_checkpoint,
    metrics_rows,
)
from tests.helpers import ROOT

# Where an unnamed run goes: no hydra.run.dir, so the stamp decides (task_name keeps the
# test's runs apart from a user's outputs/train/).
TRAIN = ["train.py", "trainer=cpu", "debug=limit", "logger=csv"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC"))}
    env.pop(launchers.STAMP_ENV, None)
    env.pop("HYDRA_FULL_ERROR", None)
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def _run_dirs(outputs: Path) -> list[Path]:
    return sorted(p for p in outputs.iterdir() if p.is_dir()) if outputs.exists() else []


@pytest.fixture
def outputs(tmp_path):
    """outputs/<a task name of this test's own>/ at the repo root, removed afterwards."""
    task = f"test-launchers-{tmp_path.name}"
    yield task, ROOT / "outputs" / task
    import shutil

    shutil.rmtree(ROOT / "outputs" / task, ignore_errors=True)


def test_torchrun_ranks_share_one_run_directory_and_its_world_size(outputs):
    task, where = outputs
    result = subprocess.run(  # no trainer.devices: torchrun's world size decides
        _torchrun("--nproc_per_node=2", "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
                  *TRAIN, f"task_name={task}"),
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = _run_dirs(where)  # one directory, not one per rank
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["best_checkpoint"].startswith(str(run_dir / "checkpoints"))
    assert metrics["effective_batch_size"] == 2 * 64  # both processes counted
    assert "effective batch size 128" in (run_dir / f"{task}.log").read_text()


@pytest.mark.slow  # two torchrun agents meeting over TCP: ~40 s
def test_two_torchrun_nodes_make_one_run(outputs):
    task, where = outputs
    port = _free_port()
    nodes = [
        subprocess.Popen(
            _torchrun(
                "--nnodes=2",
                f"--node_rank={rank}",
                "--nproc_per_node=1",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                *TRAIN,
                "trainer.devices=1",
                "trainer.num_nodes=2",
                f"task_name={task}",
            ),
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    (run_dir,) = _run_dirs(where)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["effective_batch_size"] == 2 * 64


def _slurm_env(task_id: int, port: int) -> dict[str, str]:
    """What srun sets for task `task_id` of a 2-task job on one node."""
    return _env(
        SLURM_JOB_ID="4242", SLURM_JOB_NAME="litforge-test", SLURM_NTASKS="2",
        SLURM_NTASKS_PER_NODE="2", SLURM_NNODES="1", SLURM_NODEID="0",
        SLURM_PROCID=str(task_id), SLURM_LOCALID=str(task_id), SLURM_NODELIST="127.0.0.1",
        SLURM_STEP_ID="0", MASTER_PORT=str(port),
    )  # fmt: skip


@pytest.mark.slow  # a 2-process DDP run started as srun would: ~30 s
def test_srun_tasks_share_one_run_directory_named_by_the_job(outputs):
    task, where = outputs
    port = _free_port()
    tasks = [
        subprocess.Popen(
            [sys.executable, *TRAIN, "trainer.devices=2", f"task_name={task}"],
            cwd=ROOT,
            env=_slurm_env(i, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for i in (0, 1)
    ]
    outs = [t.communicate(timeout=300)[0] for t in tasks]
    assert [t.returncode for t in tasks] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    assert _run_dirs(where) == [where / "slurm-4242"]
    metrics = json.loads((where / "slurm-4242" / "metrics.json").read_text())
    assert metrics["effective_batch_size"] == 2 * 64


def test_lightning_detects_slurm_from_a_one_node_jobs_variables(make_cfg, monkeypatch):
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    from litforge import build

    for key, value in _slurm_env(0, _free_port()).items():
        if key.startswith("SLURM_"):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "1")
    trainer = build.build_trainer(make_cfg("trainer=cpu", "logger=none", "callbacks=none"))
    assert isinstance(trainer._accelerator_connector.cluster_environment, SLURMEnvironment)
    assert launchers.launched_by() is None  # one task: nothing to agree on


def test_the_stamp_comes_from_the_launcher(monkeypatch):
    for key in [k for k in os.environ if k.startswith(("SLURM_", "TORCHELASTIC"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv(launchers.STAMP_ENV, "")  # restored after the test, whatever we set
    del os.environ[launchers.STAMP_ENV]
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    launchers.agree_on_stamp(["trainer.devices=4"])
    assert os.environ[launchers.STAMP_ENV] == "slurm-77"
    del os.environ[launchers.STAMP_ENV]
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "70")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    launchers.agree_on_stamp([])
    assert os.environ[launchers.STAMP_ENV] == "slurm-70_7"
    del os.environ[launchers.STAMP_ENV]
    launchers.agree_on_stamp(["hydra.run.dir=/somewhere"])  # an explicit directory wins
    assert launchers.STAMP_ENV not in os.environ


class SignalRankOnce(L.Callback):
    """Send `signum` (a name: KILL, STOP) to global rank `rank` at `step`, the first time
    only (a marker file in the run directory remembers): a lost worker (KILL: a lost GPU,
    the OOM killer) or a hung one (STOP)."""

    def __init__(self, step: int, rank: int, signum: str) -> None:
        self.step, self.rank, self.signum = step, rank, getattr(signal, f"SIG{signum}")

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        marker = Path(trainer.default_root_dir) / f".signalled-rank{self.rank}"
        if (trainer.global_rank, trainer.global_step) == (
            self.rank,
            self.step,
        ) and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), self.signum)


ELASTIC = [*CNN, "trainer=cpu", "trainer.devices=2", "run_name=elastic"]


def _elastic(run_dir: Path, *extra: str, restarts: int = 3) -> subprocess.CompletedProcess:
    return subprocess.run(
        _torchrun(f"--max-restarts={restarts}", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                  f"--master_port={_free_port()}", "train.py", *ELASTIC, *extra,
                  f"hydra.run.dir={run_dir}"),
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=400,
    )  # fmt: skip


@pytest.mark.slow  # three torchrun runs: ~2 min
def test_an_elastic_restart_after_a_lost_worker_ends_bitwise_where_an_uninterrupted_run_would(
    tmp_path,
):
    reference = _elastic(tmp_path / "reference", restarts=0)
    assert reference.returncode == 0, reference.stderr[-3000:]
    kill = ["+callbacks.kill._target_=tests.e2e.test_launchers.SignalRankOnce",
            "+callbacks.kill.step=13", "+callbacks.kill.rank=1", "+callbacks.kill.signum=KILL"]  # fmt: skip
    elastic = _elastic(tmp_path / "elastic", *kill)
    assert elastic.returncode == 0, elastic.stderr[-3000:]
    assert (tmp_path / "elastic" / ".signalled-rank1").exists()  # the worker did die
    assert "resuming from" in elastic.stdout + elastic.stderr
    expected = final_checkpoint(tmp_path / "reference", 30)
    got = final_checkpoint(tmp_path / "elastic", 30)
    for key in ("state_dict", "optimizer_states", "lr_schedulers"):
        assert_bitwise_equal(expected[key], got[key], key)
    reference_log, resumed_log = (
        metrics_rows(tmp_path / "reference"),
        metrics_rows(tmp_path / "elastic"),
    )
    assert_same_log(reference_log, resumed_log, epoch_resumed_mid_way=1)


@pytest.mark.slow  # a hung rank ends the group after processes.collective_timeout_s: ~40 s
def test_a_hung_worker_ends_the_group_after_the_collective_timeout(tmp_path):
    stop = ["+callbacks.stop._target_=tests.e2e.test_launchers.SignalRankOnce",
            "+callbacks.stop.step=3", "+callbacks.stop.rank=1", "+callbacks.stop.signum=STOP",
            "processes.collective_timeout_s=5"]  # fmt: skip
    started = time.monotonic()
    result = _elastic(tmp_path / "hung", *stop, restarts=1)
    assert result.returncode == 0, result.stderr[-3000:]  # timed out, restarted, finished
    assert (tmp_path / "hung" / ".signalled-rank1").exists()
    assert time.monotonic() - started < 300
    metrics = json.loads((tmp_path / "hung" / "metrics.json").read_text())
    assert metrics["global_step"] == 30


@pytest.mark.parametrize(
    ("env", "given", "taken", "error"),
    [
        ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}, {}, (2, 2), None),
        ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}, {"devices": 2}, (2, 1), None),
        ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}, {"devices": 3},
         None, "trainer.devices=3, but torchrun started 2 processes per node"),
        ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}, {"num_nodes": 2},
         None, "trainer.num_nodes=2, but torchrun started 1 node(s) of 2 processes"),
    ],
)  # fmt: skip
def test_torchrun_world_size_decides_or_contradicts_in_one_line(
    monkeypatch, env, given, taken, error
):
    from litforge.errors import ConfigError
    from litforge.launch import processes

    for key, value in {"TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "127.0.0.1", **env}.items():
        monkeypatch.setenv(key, value)
    kwargs = {"devices": "auto", "num_nodes": 1, **given}
    if error:
        with pytest.raises(ConfigError, match=re.escape(error)):
            processes.take_launcher_world(kwargs)
        return
    processes.take_launcher_world(kwargs)
    assert (kwargs["devices"], kwargs["num_nodes"]) == taken
