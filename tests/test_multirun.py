"""A job of `python train.py -m ...` as Lightning's launcher sees it (litforge.launch.multirun).

The end-to-end run with DDP is tests/e2e/test_sweep.py; these set up Hydra's job config
in-process, as Hydra does for each job.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from litforge.checkpointing.configure import run_checkpoint_url
from litforge.launch import multirun
from tests.helpers import CONF

SWEEP = ["model.optimizer.lr=0.01", "run_name=sw", "hydra.job.chdir=true"]
SWEEP_HYDRA = ["hydra.mode=MULTIRUN", "hydra.sweep.dir=/sweeps/s1", "hydra.sweep.subdir=3"]


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Callable[..., DictConfig]]:
    """job(*overrides, output_dir=...): the config of one job, with Hydra's job config set."""

    def make(*overrides: str, output_dir: Path = tmp_path / "s1" / "3") -> DictConfig:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(output_dir)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]  # as Hydra hands it to the task function
        return cfg

    yield make
    HydraConfig.instance().cfg = None


def test_child_command_is_this_job_alone(job, tmp_path):
    cfg = job(*SWEEP, *SWEEP_HYDRA)
    script = str(tmp_path / "train.py")
    assert multirun.child_argv(script, cfg) == [
        script,
        "model.optimizer.lr=0.01",
        "hydra.job.chdir=true",  # a hydra.* override that still matters to a single run
        "hydra.mode=RUN",
        "run_name='sw-3'",
    ]


def test_job_name_without_run_name_is_sweep_dir_and_job_dir(job, tmp_path):
    cfg = job("hydra.mode=MULTIRUN", output_dir=tmp_path / "2026-01-01_00-00-00" / "trial-7")
    assert multirun.job_name(cfg) == "2026-01-01_00-00-00-trial-7"
    assert multirun.child_argv("train.py", cfg)[-1] == "run_name='2026-01-01_00-00-00-trial-7'"


def test_checkpoint_key_of_a_job_is_its_directory_and_the_child_finds_it(job, tmp_path):
    store = tmp_path / "store"
    cfg = job(*SWEEP, *SWEEP_HYDRA, f"checkpoint.dir={store}", output_dir=tmp_path / "s1" / "t5")
    assert run_checkpoint_url(cfg) == f"{store}/sw-t5"
    # The child: a single run named by the job, in the job's directory.
    child = job(f"checkpoint.dir={store}", "run_name=sw-t5", output_dir=tmp_path / "s1" / "t5")
    assert run_checkpoint_url(child) == f"{store}/sw-t5"


def test_scope_points_the_launcher_at_the_job_and_restores_the_process(job, tmp_path, monkeypatch):
    cfg = job(*SWEEP, *SWEEP_HYDRA)
    argv = ["train.py", "-m", "model.optimizer.lr=0.001,0.01", "run_name=sw"]
    monkeypatch.setattr(sys, "argv", argv)
    for name in multirun.RANK_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")  # set before the job: kept
    with pytest.raises(RuntimeError), multirun.job_scope(cfg):
        assert sys.argv[1:] == multirun.child_argv("train.py", cfg)[1:]
        assert HydraConfig.get().run.dir == str(tmp_path / "s1" / "3")
        # What Lightning's launcher and processes.prepare set in the launching process.
        os.environ.update(LOCAL_RANK="0", NODE_RANK="0", WORLD_SIZE="2", MASTER_PORT="1234")
        os.environ.update(MASTER_ADDR="127.0.0.1", LITFORGE_LAUNCHER_PID=str(os.getpid()))
        dist.init_process_group(
            "gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1
        )
        raise RuntimeError("a failed job: the next one still needs a clean process")
    assert sys.argv is argv
    assert not dist.is_initialized()
    assert {name: os.environ.get(name) for name in multirun.RANK_ENV} == {
        name: "10.0.0.1" if name == "MASTER_ADDR" else None for name in multirun.RANK_ENV
    }


def test_scope_does_nothing_in_a_single_run(job, monkeypatch):
    cfg = job(*SWEEP)
    argv = ["train.py", *SWEEP]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setenv("LOCAL_RANK", "1")  # a rank some launcher started
    with multirun.job_scope(cfg):
        assert sys.argv is argv
    assert os.environ["LOCAL_RANK"] == "1"


def test_ddp_trials_in_a_launchers_worker_process_are_refused(job):
    from litforge.build import build_trainer
    from litforge.errors import ConfigError

    cfg = job(*SWEEP_HYDRA, "hydra/launcher=joblib", "trainer.devices=2")
    with pytest.raises(
        ConfigError, match=r"trainer.devices=2 in a sweep whose launcher \(JoblibLauncher\)"
    ):
        build_trainer(cfg)
    build_trainer(job(*SWEEP_HYDRA, "trainer.devices=2"))  # the basic launcher: this process
