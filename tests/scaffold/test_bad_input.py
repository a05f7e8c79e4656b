"""Bad input to the scaffold: one clear line each, before anything is written (no copier run)."""

from __future__ import annotations

import subprocess

import pytest

from litforge.scaffold import __main__ as cli
from litforge.scaffold import checks, view
from litforge.scaffold.checks import ScaffoldError
from litforge.scaffold.experiment import new_experiment
from litforge.scaffold.project import new_project, update
from tests.helpers import ROOT
from tests.scaffold.conftest import SOURCE


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("my-exp", "not a Python identifier"),
        ("1exp", "not a Python identifier"),
        ("class", "Python keyword"),
        ("match", "Python keyword"),
        ("MyExp", "lower case"),
        (SOURCE, "the template's own name"),
        ("torch", "would shadow the installed module `torch`"),
        ("lightning", "would shadow"),
        ("hydra", "would shadow"),
        ("omegaconf", "would shadow"),
        ("sklearn", "would shadow"),
        ("json", "would shadow"),
        ("yaml", "would shadow the installed module `yaml`"),  # PyYAML, named by no dependency
    ],
)
def test_bad_project_name_is_refused_before_anything_is_written(tmp_path, name, message):
    dest = tmp_path / "dest"
    with pytest.raises(ScaffoldError, match=message):
        new_project(name, dest, source=ROOT)
    assert not dest.exists() and list(tmp_path.iterdir()) == []


def test_dest_inside_the_template_is_refused(tmp_path):
    for dest in (ROOT / "sub" / "p", ROOT, ROOT.parent):
        with pytest.raises(ScaffoldError, match="inside the template|contains the template"):
            new_project("fresh_exp", dest, source=ROOT)
    assert not (ROOT / "sub").exists()


def test_non_empty_dest_needs_force(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="not empty; pass --force"):
        new_project("fresh_exp", tmp_path, source=ROOT)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_unknown_extra_lists_the_valid_ones(tmp_path):
    with pytest.raises(
        ScaffoldError,
        match=r"--without gpu: not an extra a project can leave out.*sweeps.*wandb.*s3",
    ):
        new_project("fresh_exp", tmp_path / "d", source=ROOT, without="wandb,gpu")
    assert not (tmp_path / "d").exists()


def test_no_git_executable(monkeypatch, tmp_path):
    monkeypatch.setattr(checks.shutil, "which", lambda name: None)
    with pytest.raises(ScaffoldError, match="no `git` executable"):
        new_project("fresh_exp", tmp_path / "d", source=ROOT)


def test_existing_experiment_writes_nothing(tmp_path):
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "foo.yaml").write_text("# mine\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "proj"\n')
    with pytest.raises(ScaffoldError, match=r"conf/experiment/foo.yaml.* already exist"):
        new_experiment(tmp_path, "foo", data=True)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "conf", "conf/experiment", "conf/experiment/foo.yaml", "pyproject.toml"
    ]  # fmt: skip
    with pytest.raises(ScaffoldError, match="lower-case identifier"):
        new_experiment(tmp_path, "Foo-bar")


def test_cli_prints_one_error_line_and_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["new-project", "torch", str(tmp_path / "d"), "--template", str(ROOT)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: NAME=torch would shadow") and err.count("\n") == 1


@pytest.mark.parametrize("inside", [True, False], ids=["under-it", "it"])
def test_a_read_only_dest_is_one_line(read_only_dir, capsys, monkeypatch, inside):
    """`make new-project DEST=<read-only dir>`: a DEST in it, or the (empty) directory itself."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    dest = read_only_dir / "my_exp" if inside else read_only_dir
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["new-project", "fresh_exp", str(dest), "--template", str(ROOT)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"error: DEST={dest} is not writable ({read_only_dir} is not writable); choose a "
        "directory you can write to\n"
    )


def test_a_plain_copy_cannot_be_updated(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with pytest.raises(ScaffoldError, match="not generated from a template"):
        update(tmp_path)


def test_a_directory_that_is_not_a_view_is_left_alone(tmp_path):
    (tmp_path / "precious.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="not a template view"):
        view.build(ROOT, view=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["precious.txt"]
