"""A template fix reaches a generated project through `update`, and the user's own edit
elsewhere stays (copier's three-way merge)."""

from __future__ import annotations

import shutil

import pytest
import yaml

from litforge.scaffold.checks import ScaffoldError
from litforge.scaffold.project import new_project, update
from tests.scaffold.conftest import IDENTITY, NAME, clone_template, git, run_in


@pytest.mark.slow  # ~16 s: two generations and a three-way merge (CI time)
def test_update_brings_a_template_change_and_keeps_the_user_edit(tmp_path, view_cache):
    source = clone_template(tmp_path / "template_src")
    project = new_project(NAME, tmp_path / NAME, source=source)
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    old = answers["_commit"]

    # The user's edit, committed; then a fix in another file of the template, tagged.
    trainer = project / "src" / NAME / "conf" / "trainer" / "cpu.yaml"
    trainer.write_text(trainer.read_text() + "# my own note\n")
    git(*IDENTITY, "commit", "-qam", "my note", cwd=project)
    cnn = source / "conf" / "model" / "cnn.yaml"
    cnn.write_text(cnn.read_text().replace("  hidden: 128\n", "  hidden: 96\n"))
    git(*IDENTITY, "commit", "-qam", "template fix", cwd=source)
    git("tag", "v9.9.9", cwd=source)

    dirty = project / "scratch.txt"
    dirty.write_text("not committed")
    with pytest.raises(ScaffoldError, match="uncommitted changes; commit or stash them first"):
        update(project)
    dirty.unlink()

    # A lost cache: the recorded version is rebuilt from the template's commit.
    shutil.rmtree(answers["_src_path"])
    result = run_in(project, "-m", f"{NAME}.scaffold", "update")  # the project's own copy
    assert result.returncode == 0, result.stderr[-3000:]
    assert "  hidden: 96\n" in (project / "conf" / "model" / "cnn.yaml").read_text()
    assert trainer.read_text().endswith("# my own note\n")
    new = yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"]
    assert new != old and new in (project / "README.md").read_text()
    changed = set(git("status", "--porcelain", cwd=project).split())
    assert changed == {"M", ".copier-answers.yml", "README.md", "conf/model/cnn.yaml"}

    git(*IDENTITY, "commit", "-qam", "take in the template fix", cwd=project)
    assert update(project) == new  # nothing to do: already at the newest version
