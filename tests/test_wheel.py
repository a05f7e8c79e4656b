"""The wheel is the library: built from this repository, installed into a fresh venv, it
imports and trains a project's fast_dev_run with no source tree on the path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

from tests.helpers import ROOT


def _site_packages(env_dir: Path) -> Path:
    scheme = {"base": str(env_dir), "platbase": str(env_dir)}
    return Path(sysconfig.get_path("purelib", vars=scheme))


def test_a_wheel_installs_and_trains_without_the_source_tree(tmp_path):
    # No PYTHONPATH: a checkout on it (with its egg-info) would count as installed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HYDRA_FULL_ERROR")}
    source = tmp_path / "source"  # built from a copy: a build leaves build/ behind
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(source)],
        env=env, check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = dist.glob("litforge-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "litforge/conf/litforge/train.yaml" in names
    assert "litforge/conf/trainer/fsdp.yaml" in names
    assert "hydra_plugins/litforge_conf/searchpath.py" in names
    assert not [n for n in names if n.startswith("litforge_examples/")]  # the project's, not ours
    assert "litforge/scaffold/project_files/Makefile.jinja" in names  # what new-project adds

    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=False)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(fresh / "bin" / "python"), "install",
         "--quiet", "--no-deps", str(wheel)],
        env=env, check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    # litforge's dependencies from this venv's site-packages, as a plain path: its .pth
    # files (the editable install of the checkout among them) are not read from there.
    ours = _site_packages(Path(sys.prefix))
    (_site_packages(fresh) / "dependencies.pth").write_text(f"{ours}\n")

    project = tmp_path / "project"  # a project: its code, conf/ and train.py; not litforge
    shutil.copytree(ROOT / "conf", project / "conf")
    shutil.copytree(
        ROOT / "src" / "litforge_examples",
        project / "src" / "litforge_examples",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "train.py", project / "train.py")
    python = str(fresh / "bin" / "python")
    where = subprocess.run(
        [python, "-c", "import litforge, sys; print(litforge.__file__)"],
        cwd=project, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(fresh), where.stdout
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [python, "train.py", "debug=fdr", "trainer=cpu", f"hydra.run.dir={run_dir}"],
        cwd=project, env={**env, "CI": "1", "PYTHONPATH": str(project / "src")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((run_dir / "metrics.json").read_text())["global_step"] == 1
