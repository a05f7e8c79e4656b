"""`make train` installs the core and the example project only; `make test` the dev
extras on top, whichever comes first (read from make's own plan, `make -n`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import ROOT


def plan(target: str, venv: Path) -> list[str]:
    """The install commands `make TARGET` would run for the venv at `venv`."""
    out = subprocess.run(["make", "-n", "-C", str(ROOT), f"VENV={venv}", target],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [line for line in out.splitlines() if "pip install" in line]


def test_train_installs_the_core_and_test_the_dev_extras(tmp_path):
    venv = tmp_path / "venv"
    (train,) = plan("train", venv)
    assert train.endswith(" -e .") and "torch==" in train
    core, dev = plan("test", venv)
    assert core == train and dev.endswith(' -e ".[dev]"') and "torch==" in dev


def test_after_make_train_make_test_adds_only_the_extras(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-core").touch()  # what `make train` leaves
    assert plan("train", venv) == []
    (dev,) = plan("test", venv)
    assert dev.endswith(' -e ".[dev]"')
    (venv / ".installed").touch()  # and `make test` then
    assert plan("train", venv) == [] and plan("test", venv) == []
