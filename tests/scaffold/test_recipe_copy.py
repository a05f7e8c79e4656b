"""`litforge recipe copy`: a project owns its training loop. The copy trains to the same
metrics as the library's recipe, an edit to it runs, `recipe diff` shows the edit, and a
project whose train.py no longer imports litforge's recipe gets one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from litforge.scaffold.checks import ScaffoldError
from litforge.scaffold.recipe import copy_recipe, diff_recipe
from tests.helpers import ROOT
from tests.scaffold.conftest import run_in

RUN = ["debug=fdr", "trainer=cpu", "trainer.max_steps=3", "trainer.limit_val_batches=2"]


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    for script in ("train.py", "eval.py"):
        shutil.copy(ROOT / script, project / script)
    return project


def _metrics(project: Path, run_dir: Path, *extra: str) -> tuple[dict, str]:
    result = run_in(project, "train.py", *RUN, *extra, f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics.pop("best_checkpoint")  # in each run's own directory
    return metrics, result.stdout + result.stderr


def test_the_copied_recipe_trains_the_same_and_an_edit_runs(tmp_path):
    project = _project(tmp_path)
    library, _ = _metrics(project, tmp_path / "library")

    made = run_in(project, "-m", "litforge.commands", "recipe", "copy", "--project", str(project))
    assert made.returncode == 0, made.stderr[-3000:]
    recipe = project / "recipe.py"
    assert "from recipe import train" in (project / "train.py").read_text()
    assert "from litforge import entry_point, steps\n" in recipe.read_text()  # public names only
    text = recipe.read_text()
    edited = text.replace(
        "    steps.check_config(cfg)\n",
        "    steps.check_config(cfg)\n    print('my own loop ran', flush=True)\n",
    )
    assert edited != text
    recipe.write_text(edited)

    own, said = _metrics(project, tmp_path / "own")
    assert "my own loop ran" in said
    assert own == library
    assert "+    print('my own loop ran', flush=True)" in diff_recipe(project)


def test_a_second_copy_or_a_changed_entry_script_is_one_line(tmp_path):
    project = _project(tmp_path)
    copy_recipe(project)
    with pytest.raises(ScaffoldError, match="recipe.py exists .* --force replaces it"):
        copy_recipe(project)
    copy_recipe(project, force=True)  # train.py already points at the copy: accepted
    (project / "train.py").write_text("from mine import train\n")
    with pytest.raises(ScaffoldError, match="does not import train from litforge"):
        copy_recipe(project, force=True)
    with pytest.raises(ScaffoldError, match="has no train.py"):
        copy_recipe(tmp_path / "elsewhere")
