"""One generated project (fast tier): renamed everywhere, only tracked files, a fresh git
repository with its template record; it trains, and takes a new experiment that trains."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.helpers import ROOT
from tests.scaffold.conftest import NAME, SOURCE, git, run_in

TRACE = re.compile(SOURCE, re.IGNORECASE)
PLUGIN = ROOT / "src" / "hydra_plugins" / f"{SOURCE}_optuna"  # absent from a --without sweeps copy


def test_no_trace_of_the_template_name_outside_the_answers_file(generated):
    files = git("ls-files", cwd=generated).split("\n")
    assert f"src/{NAME}/training.py" in files
    if PLUGIN.is_dir():
        assert f"src/hydra_plugins/{NAME}_optuna/__init__.py" in files
    for rel in filter(None, files):
        assert not TRACE.search(rel), rel
        if rel != ".copier-answers.yml":
            text = (generated / rel).read_bytes().decode(errors="replace")
            assert not TRACE.search(text), f"{rel}: {TRACE.search(text)}"
    pyproject = (generated / "pyproject.toml").read_text()
    assert f'name = "{NAME}"' in pyproject


def test_fresh_repository_of_tracked_files_with_its_template_record(generated, template_src):
    assert git("log", "--format=%s", cwd=generated).strip().startswith(f"New project {NAME}")
    assert git("status", "--porcelain", cwd=generated) == ""
    present = {p.name for p in generated.rglob("*")}
    assert not present & {".venv", "outputs", "multirun", "__pycache__", "latest.json", "latest.md"}
    answers = yaml.safe_load((generated / ".copier-answers.yml").read_text())
    assert answers["name"] == NAME and answers["source"] == str(template_src)
    assert re.fullmatch(r"v[\d.]+\.post\d+\+g[0-9a-f]{12}", answers["_commit"])
    readme = (generated / "README.md").read_text()
    assert readme.startswith(f"# {NAME}\n") and answers["_commit"] in readme[:1000]
    assert "make update-template" in readme[:1000]
    for notebook in generated.glob("notebooks/*.ipynb"):
        assert all(not c.get("outputs") for c in json.loads(notebook.read_text())["cells"])


def test_generated_project_trains_and_takes_a_new_experiment(generated, tmp_path):
    result = run_in(generated, "train.py", "debug=fdr", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"[{NAME}]" in result.stdout + result.stderr  # its own package ran, not the template's
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["global_step"] == 1

    # The project's own (renamed) scaffold adds the experiment; a copy keeps `generated` clean.
    project = tmp_path / "copy"
    git("clone", "-q", str(generated), str(project), cwd=tmp_path)
    made = run_in(project, "-m", f"{NAME}.scaffold", "experiment", "foo", "--model", "--data")
    assert made.returncode == 0, made.stderr[-3000:]
    for rel in ("conf/experiment/foo.yaml", "conf/model/foo.yaml", "conf/data/foo.yaml",
                f"src/{NAME}/models/foo.py", f"src/{NAME}/data/foo.py", "tests/test_foo.py"):  # fmt: skip
        assert (project / rel).is_file(), rel
    again = run_in(project, "-m", f"{NAME}.scaffold", "experiment", "foo")
    assert again.returncode == 2 and "already exist" in again.stderr
    run = run_in(
        project, "train.py", "experiment=foo", "debug=fdr", f"hydra.run.dir={tmp_path / 'foo'}"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((tmp_path / "foo" / "metrics.json").read_text())["global_step"] == 1


def test_both_optuna_plugins_coexist(generated):
    """The installed template's hydra_plugins/<template>_optuna and the project's own are both
    found in the hydra_plugins namespace package (the slow tier runs the project's sweeps)."""
    if not PLUGIN.is_dir():
        pytest.skip("this template has no Optuna plugin (made --without sweeps)")
    code = (
        "import importlib.util as u\n"
        f"print(u.find_spec('hydra_plugins.{NAME}_optuna').origin)\n"
        f"print(u.find_spec('hydra_plugins.{SOURCE}_optuna') is not None)"
    )
    result = run_in(generated, "-c", code)
    assert result.returncode == 0, result.stderr[-3000:]
    origin, installed = result.stdout.split()
    assert origin.startswith(str(generated / "src")) and installed == "True"
    sweeper = (generated / "src" / NAME / "conf" / "hydra" / "sweeper" / "optuna.yaml").read_text()
    assert f"_target_: hydra_plugins.{NAME}_optuna.optuna_sweeper.OptunaSweeper" in sweeper
