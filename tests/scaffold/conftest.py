"""Fixtures of the scaffold tests: a scratch template repository, a template-view cache of
the test's own, and one generated project shared by the fast tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from litforge.scaffold.checks import source_name
from tests.helpers import ROOT

SOURCE = source_name(ROOT)  # the template's package name
NAME = "my_exp" if SOURCE != "my_exp" else "other_exp"  # the generated project's
# The scaffold's own files: overlaid on the clone so the template under test is this work
# tree's scaffold even before it is committed (other uncommitted work is left out).
OWN = ["src/litforge/scaffold", "tests/scaffold", "Makefile", "pyproject.toml"]
IDENTITY = ["-c", "user.name=test", "-c", "user.email=test@localhost"]


def git(*args: str, cwd: Path) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return result.stdout


def clone_template(dest: Path) -> Path:
    """A git clone of this repository at HEAD plus the scaffold's uncommitted files."""
    git("clone", "-q", "--no-hardlinks", str(ROOT), str(dest), cwd=ROOT)
    listed = git("ls-files", "-co", "--exclude-standard", "--", *OWN, cwd=ROOT).split("\n")
    for rel in filter(None, listed):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    if git("status", "--porcelain", cwd=dest).strip():
        git("add", "-A", cwd=dest)
        git(*IDENTITY, "commit", "-q", "-m", "scaffold (work tree)", cwd=dest)
    return dest


def run_in(project: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python *args` in a generated project, with its src/ first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    # First on the path; what was there stays behind it (the template itself, when these
    # tests run in a generated project that is not pip-installed).
    path = os.pathsep.join(filter(None, [str(project / "src"), env.get("PYTHONPATH")]))
    env.update(PYTHONPATH=path, CI="1", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def view_cache(tmp_path_factory) -> Iterator[Path]:
    """XDG_CACHE_HOME for this session: template views never land in the real ~/.cache."""
    cache = tmp_path_factory.mktemp("xdg_cache")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(scope="session")
def template_src(tmp_path_factory, view_cache) -> Path:
    return clone_template(tmp_path_factory.mktemp("scratch") / "template_src")


@pytest.fixture(scope="session")
def generated(tmp_path_factory, template_src) -> Path:
    """The full project `my_exp`, generated once for the fast tests (read-only for them)."""
    from litforge.scaffold.project import new_project

    return new_project(NAME, tmp_path_factory.mktemp("gen") / NAME, source=template_src)


@pytest.fixture(scope="session")
def generated_minimal(tmp_path_factory, template_src) -> Path:
    """`make new-project ARGS=--minimal`'s project, generated once (read-only for the tests)."""
    from litforge.scaffold.project import new_project

    name = f"{NAME}_min"
    return new_project(name, tmp_path_factory.mktemp("gen_min") / name, source=template_src,
                       minimal=True)  # fmt: skip
