"""Slow tier: a generated project cloned elsewhere, the template checkout out of reach,
installs litforge from its pin (the remote at the template commit, or the carried wheel)
into a fresh venv with its own `make`, trains, and passes its tests in under 2 minutes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from litforge.scaffold.project import new_project
from tests.scaffold.conftest import git

pytestmark = pytest.mark.slow


@contextmanager
def out_of_reach(template: Path) -> Iterator[None]:
    """The template checkout moved away (and back after): no path to it resolves."""
    hidden = template.with_name(template.name + ".hidden")
    template.rename(hidden)
    try:
        yield
    finally:
        hidden.rename(template)


def make(
    project: Path, *targets: str, timeout: int = 1200
) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["CI"] = "1"
    start = time.monotonic()
    result = subprocess.run(
        ["make", *targets], cwd=project, env=env, capture_output=True, text=True, timeout=timeout
    )
    return result, time.monotonic() - start


def _clone_installs_trains_and_tests(project: Path, tmp_path: Path) -> Path:
    clone = tmp_path / "elsewhere" / project.name
    git("clone", "-q", str(project), str(clone), cwd=tmp_path)
    installed, _ = make(clone, "install")
    assert installed.returncode == 0, installed.stderr[-3000:]
    run_dir = tmp_path / "run"
    trained, _ = make(clone, "train", f"ARGS=debug=fdr trainer=cpu hydra.run.dir={run_dir}")
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert json.loads((run_dir / "metrics.json").read_text())["global_step"] == 1
    tested, seconds = make(clone, "test")
    assert tested.returncode == 0, (tested.stdout + tested.stderr)[-3000:]
    assert seconds < 120, f"make test took {seconds:.0f} s"
    return clone


def _importable(clone: Path, module: str) -> bool:
    code = f"import importlib.util as u; print(u.find_spec({module!r}) is not None)"
    out = subprocess.run(
        [str(clone / ".venv/bin/python"), "-c", code], capture_output=True, text=True
    )
    return out.stdout.strip() == "True"


def test_from_the_remote_pin_without_wandb_mlflow_s3(tmp_path, template_src):
    bare = tmp_path / "remote.git"  # stands in for the template's remote
    git("clone", "-q", "--bare", str(template_src), str(bare), cwd=tmp_path)
    old_origin = git("remote", "get-url", "origin", cwd=template_src).strip()
    git("remote", "set-url", "origin", f"file://{bare}", cwd=template_src)
    try:
        project = new_project(
            "remote_exp", tmp_path / "remote_exp", source=template_src,
            without="wandb,mlflow,s3,sweeps", with_extras="tensorboard",
        )  # fmt: skip
    finally:
        git("remote", "set-url", "origin", old_origin, cwd=template_src)
    assert not (project / "vendor").exists()
    with out_of_reach(template_src):
        clone = _clone_installs_trains_and_tests(project, tmp_path)
    for module in ("wandb", "mlflow", "s3fs", "optuna"):
        assert not _importable(clone, module), module
    # tensorboard: no file of the project uses it, so only because --with asked for it
    assert _importable(clone, "litforge") and _importable(clone, "tensorboard")


def test_from_the_carried_wheel(tmp_path, template_src):
    project = new_project(
        "wheel_exp", tmp_path / "wheel_exp", source=template_src, minimal=True,
        without="wandb,mlflow,s3,sweeps,tensorboard,slurm",
    )  # fmt: skip
    assert list((project / "vendor").glob("litforge-*.whl"))
    with out_of_reach(template_src):
        _clone_installs_trains_and_tests(project, tmp_path)
