"""`make update-template`: a library fix committed in the template reaches the project by
moving its litforge pin; the project's skeleton files take in template changes; the user's
code and configs are never touched."""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile

import pytest
import yaml

from litforge.scaffold.checks import ScaffoldError
from litforge.scaffold.project import new_project, update
from litforge.scaffold.recipe import copy_recipe
from tests.scaffold.conftest import IDENTITY, NAME, clone_template, git

FIX = "# A checkpointing fix made in the template after the project was generated.\n"


@pytest.mark.slow  # ~30 s: two template views (two wheels), a copier update, an install
def test_update_moves_the_pin_and_leaves_the_users_code_alone(tmp_path, view_cache, capfd):
    source = clone_template(tmp_path / "template_src")
    project = new_project(NAME, tmp_path / NAME, source=source)
    old_pin = (project / "pyproject.toml").read_text()

    # The user's own edits, committed: a model, a config, and a skeleton file.
    model = project / "src" / NAME / "models" / "classifier.py"
    model.write_text(model.read_text() + "# my model change\n")
    cnn = project / "conf" / "model" / "cnn.yaml"
    cnn.write_text(cnn.read_text().replace("  hidden: 128\n", "  hidden: 64\n"))
    makefile = project / "Makefile"
    makefile.write_text("# my own target notes\n" + makefile.read_text())
    recipe = copy_recipe(project)  # the user owns the loop: recipe.py, train.py pointed at it
    recipe.write_text(recipe.read_text() + "# my own loop\n")
    # An extra added by hand, as the project's README says (experiment=hf_finetune's).
    pyproject = project / "pyproject.toml"
    pyproject.write_text(re.sub(r"litforge\[", "litforge[hf,", pyproject.read_text()))
    git(*IDENTITY, "add", "-A", cwd=project)
    git(*IDENTITY, "commit", "-qam", "my changes", cwd=project)
    own_recipe = recipe.read_text()

    # In the template: a library fix, a change to an example, a change to a skeleton file.
    library = source / "src" / "litforge" / "checkpointing" / "store.py"
    library.write_text(library.read_text() + FIX)
    example = source / "src" / "litforge_examples" / "nets" / "cnn.py"
    example.write_text(example.read_text() + "# an example change\n")
    train = source / "train.py"
    train.write_text(train.read_text() + "# a new line in the entry script\n")
    skeleton = source / "src" / "litforge" / "scaffold" / "project_files" / "Makefile.jinja"
    skeleton.write_text(skeleton.read_text() + "# a new line in the skeleton Makefile\n")
    git(*IDENTITY, "commit", "-qam", "template fix", cwd=source)

    dirty = project / "scratch.txt"
    dirty.write_text("not committed")
    with pytest.raises(ScaffoldError, match="uncommitted changes; commit or stash them first"):
        update(project)
    dirty.unlink()

    # A lost cache: the recorded version is rebuilt from the template's commit.
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    shutil.rmtree(answers["_src_path"])
    new_tag = update(project)

    new_pin = (project / "pyproject.toml").read_text()
    version = re.search(r"litforge\[[\w,]+\]==(\S+)\"", new_pin)[1]
    assert "hf" in re.search(r"litforge\[([\w,]+)\]", new_pin)[1].split(",")  # kept
    assert "<<<<<<<" not in new_pin  # the hand-added extra rides on the moved pin
    assert new_pin != old_pin and new_tag == f"v{version}"
    (wheel,) = (project / "vendor").glob("*.whl")  # the old wheel went with the old pin
    assert version in wheel.name
    assert FIX in zipfile.ZipFile(wheel).read("litforge/checkpointing/store.py").decode()
    # Skeleton files take in the template's changes, the user's edits kept.
    assert train.read_text().splitlines()[-1] in (project / "train.py").read_text()
    assert "# my own target notes\n" in makefile.read_text()
    assert "# a new line in the skeleton Makefile\n" in makefile.read_text()
    # The user's code and configs: as the user left them; the example change stays out.
    assert model.read_text().endswith("# my model change\n")
    assert "  hidden: 64\n" in cnn.read_text()
    assert "an example change" not in (project / "src" / NAME / "nets" / "cnn.py").read_text()
    # The copied recipe: untouched, still the one train.py runs, and the update said so.
    assert recipe.read_text() == own_recipe
    assert "from recipe import train" in (project / "train.py").read_text()
    assert "left recipe.py alone" in capfd.readouterr().err
    changed = {line[3:] for line in git("status", "--porcelain", cwd=project).splitlines()}
    assert not [p for p in changed if p.startswith((f"src/{NAME}/", "conf/", f"tests/{NAME}/"))]

    # The moved pin installs: the fixed library is what the project's environment imports.
    target = tmp_path / "site"
    subprocess.run(
        ["python3", "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert FIX in (target / "litforge" / "checkpointing" / "store.py").read_text()

    git(*IDENTITY, "add", "-A", cwd=project)
    git(*IDENTITY, "commit", "-qm", "take in the template fix", cwd=project)
    assert update(project) == new_tag  # nothing to do: already at the newest version
