"""Slow tier: generated projects run their own test suites (`--minimal`, `--without ...`,
the full project) as subprocesses with this environment and PYTHONPATH (nothing installed)."""

from __future__ import annotations

import json
import re

import pytest

from litforge.scaffold.project import new_project
from tests.scaffold.conftest import SOURCE, git, run_in

pytestmark = pytest.mark.slow

# The project's own default tier; its scaffold tests would generate from it once more.
OWN_TESTS = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--deselect", "tests/scaffold"]


def _trains(project, tmp_path) -> None:
    result = run_in(project, "train.py", "debug=fdr", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["global_step"] == 1


def _own_tests_pass(project) -> None:
    result = run_in(project, *OWN_TESTS, timeout=3600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]


def _no_trace(project) -> None:
    for rel in filter(None, git("ls-files", cwd=project).split("\n")):
        if rel != ".copier-answers.yml":
            assert not re.search(SOURCE, (project / rel).read_text(errors="replace"), re.I), rel


def test_minimal_project_trains_and_passes_its_own_tests(tmp_path, template_src):
    project = new_project("mini_exp", tmp_path / "mini_exp", source=template_src, minimal=True)
    files = git("ls-files", cwd=project)
    for gone in ("nets/gpt.py", "models/language_model.py", "data/text.py", "conf/data/text.yaml",
                 "conf/experiment/gpt_char.yaml", "benchmarks/"):  # fmt: skip
        assert gone not in files, gone
    assert "bench:" not in (project / "Makefile").read_text()
    _no_trace(project)
    _trains(project, tmp_path)
    _own_tests_pass(project)


def test_project_without_wandb_s3_sweeps_trains_and_passes_its_own_tests(tmp_path, template_src):
    project = new_project(
        "lean_exp", tmp_path / "lean_exp", source=template_src, without="wandb,s3,sweeps"
    )
    pyproject = (project / "pyproject.toml").read_text()
    for dep in ('"wandb', '"optuna', '"cmaes', "s3fs", "moto", "boto3"):
        assert dep not in pyproject, dep
    files = git("ls-files", cwd=project)
    for gone in ("wandb_logger.py", "conf/logger/wandb.yaml", "sweeps/", "hparams_search/",
                 "lean_exp_optuna", "tests/s3server.py"):  # fmt: skip
        assert gone not in files, gone
    _trains(project, tmp_path)
    _own_tests_pass(project)


def test_full_project_passes_its_own_tests(generated):
    """About as long as this repository's own default tier (~16 min on 2 cores)."""
    _own_tests_pass(generated)
