"""Shared fixtures: compose configs in-process, run the entry points as subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from litforge.cli import CONF_DIR, quote_numeric_choices

ROOT = Path(__file__).resolve().parents[1]

# Small enough that a GPT step takes milliseconds on one CPU core.
TINY_GPT = [
    "experiment=gpt_char",
    "data.block_size=32",
    "data.batch_size=8",
    "model.net.n_layer=1",
    "model.net.n_embd=32",
    "model.net.n_head=2",
]


def compose_config(overrides: list[str], run_dir: Path, config_name: str = "train") -> DictConfig:
    """The config `python train.py *overrides` would see, writing into run_dir."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=quote_numeric_choices(overrides))
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    return cfg


@pytest.fixture
def s3(tmp_path_factory, monkeypatch):
    """A fresh moto S3 server with bucket `litforge`; the AWS_* environment points at it."""
    from tests.s3server import S3Server

    server = S3Server(tmp_path_factory.mktemp("moto"))
    server.start()
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    import fsspec

    fsspec.filesystem("s3").clear_instance_cache()  # no session left from another server
    yield server
    server.stop()


@pytest.fixture
def make_cfg(tmp_path: Path) -> Callable[..., DictConfig]:
    def make(*overrides: str, config_name: str = "train", run_dir: Path | None = None):
        return compose_config(list(overrides), run_dir or tmp_path / "run", config_name)

    return make


def run_entry(
    script: str, *args: str, run_dir: Path, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    """`python {script} {args}` at the repo root with its run directory at run_dir."""
    full_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    full_env.update(PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(
        [sys.executable, script, *args, f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
