"""Fixtures: configs composed in-process, a real S3 server on 127.0.0.1 (helpers: helpers.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

from litforge.cli import compose


@pytest.fixture
def s3_wrong_secret(tmp_path_factory, monkeypatch):
    """A moto S3 server that checks signatures, with the environment's secret wrong: every
    request is refused as bad credentials would be."""
    import fsspec

    from tests.s3server import S3Server

    server = S3Server(tmp_path_factory.mktemp("moto-auth"), require_auth=True)
    server.start()
    for key, value in server.env(secret="wrong").items():
        monkeypatch.setenv(key, value)
    fsspec.filesystem("s3").clear_instance_cache()
    yield server
    server.stop()
    fsspec.filesystem("s3").clear_instance_cache()


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
    """make_cfg(*overrides, config_name="train"): the config `python train.py *overrides`
    would see, writing into tmp_path/run unless run_dir= is given."""

    def make(*overrides: str, config_name: str = "train", run_dir: Path | None = None):
        return compose(list(overrides), run_dir or tmp_path / "run", config_name)

    return make


@pytest.fixture(autouse=True)
def log_levels_as_before():
    """A Hydra job run in this process sets the root logger to INFO: without this, a later
    test's caplog would also hold the INFO lines of runs it did not look at."""
    import logging

    levels = {name: logging.getLogger(name).level for name in ("", "litforge")}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture(autouse=True)
def no_process_group_left_behind():
    """A test that starts a process group in the test process (DDP or FSDP in-process)
    leaves its MASTER_PORT in the environment and its store listening there: every later
    DDP subprocess would inherit the port and fail with EADDRINUSE. Run those in a
    subprocess (tests.helpers.run_entry)."""
    import os

    before = os.environ.get("MASTER_PORT")
    yield
    after = os.environ.get("MASTER_PORT")
    assert after == before, (
        f"this test left MASTER_PORT={after} behind: run its training in a subprocess"
    )


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    """A tiny random-weight Llama saved with its tokenizer (tests.hf_models); needs the hf extra."""
    from tests.hf_models import tiny_llama

    return tiny_llama(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    """Python's textwrap source, twice: a small local corpus for the text models."""
    import inspect
    import textwrap

    path = tmp_path_factory.mktemp("text") / "textwrap.py"
    path.write_text(inspect.getsource(textwrap) * 2)
    return path


@pytest.fixture
def read_only_dir(tmp_path: Path):
    """A directory this process cannot write to: mode 0555 for a user, a read-only tmpfs
    for root (root writes anywhere else, so chmod would prove nothing)."""
    import os
    import subprocess

    where = tmp_path / "ro"
    where.mkdir()
    if os.geteuid() != 0:
        where.chmod(0o555)
        yield where
        where.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(where)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.strip()}")
    yield where
    subprocess.run(["umount", str(where)], check=True)
