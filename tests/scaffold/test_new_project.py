"""A new project is the example project only, renamed, with litforge pinned: no copy of the
library's infrastructure, its own tests passing against the installed litforge."""

from __future__ import annotations

import re
import shutil
import zipfile

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from litforge.scaffold.parts import EXAMPLE_PACKAGE
from litforge.scaffold.project import new_project
from tests.scaffold.conftest import NAME, git, run_in


def _files(project) -> list[str]:
    return [f for f in git("ls-files", cwd=project).split("\n") if f]


def _requirement(project) -> str:
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    (litforge,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("litforge")]
    return litforge


def test_a_project_holds_its_own_code_and_no_copy_of_the_library(generated):
    files = _files(generated)
    assert not [f for f in files if f.startswith(("src/litforge", "benchmarks/", "tests/scaffold"))]
    assert {"train.py", "eval.py", "Makefile", "pyproject.toml", "README.md", ".ci/run",
            "conf/train.yaml", f"src/{NAME}/models/classifier.py", f"src/{NAME}/nets/gpt.py",
            f"tests/{NAME}/test_smoke.py", "tests/conftest.py"} <= set(files)  # fmt: skip
    python = sum(len((generated / f).read_text().splitlines()) for f in files if f.endswith(".py"))
    assert python <= 1000, python
    # Litforge's own groups come from the installed library, not from copies.
    assert not [f for f in files if f.startswith(("conf/trainer/", "conf/callbacks/"))]


def test_the_example_package_name_is_gone_and_litforge_stays(generated):
    for rel in _files(generated):
        if rel.endswith((".py", ".yaml", ".md", ".toml", "Makefile")):
            text = (generated / rel).read_text()
            assert EXAMPLE_PACKAGE not in text, rel
    assert "_target_: my_exp.nets.cnn.CNN" in (generated / "conf/model/cnn.yaml").read_text()
    assert "from litforge import" in (generated / f"src/{NAME}/models/classifier.py").read_text()


def test_a_full_projects_make_train_installs_no_dev_tools(generated):
    makefile = (generated / "Makefile").read_text()
    assert "train: $(CORE)" in makefile and "test: $(STAMP)" in makefile  # no dev tools to train


def test_without_a_remote_the_project_carries_the_wheel_it_pins(generated):
    requirement = _requirement(generated)
    found = re.fullmatch(r"litforge\[([\w,]+)\]==(\S+)", requirement)
    assert found, requirement
    # its Optuna sweeps; not every logger and launcher, and not the Hugging Face stack or
    # wandb: the HF experiment and the W&B sweep ship, and name their extra when run without
    assert set(found[1].split(",")) == {"sweeps", "scaffold"}
    assert (generated / "conf/experiment/hf_finetune.yaml").is_file()
    assert (generated / "conf/wandb_sweep.yaml").is_file()
    assert "add it inside the brackets" in (generated / "README.md").read_text()
    (wheel,) = (generated / "vendor").glob("*.whl")
    assert wheel.name.startswith(f"litforge-{found[2]}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "litforge/conf/litforge/train.yaml" in names
    assert not [n for n in names if n.startswith(EXAMPLE_PACKAGE)]


def test_with_a_remote_the_project_pins_its_commit(tmp_path, template_src):
    bare = tmp_path / "remote.git"
    git("clone", "-q", "--bare", str(template_src), str(bare), cwd=tmp_path)
    old_origin = git("remote", "get-url", "origin", cwd=template_src).strip()
    git("remote", "set-url", "origin", f"file://{bare}", cwd=template_src)
    try:
        project = new_project("pinned_exp", tmp_path / "pinned_exp", source=template_src)
    finally:
        git("remote", "set-url", "origin", old_origin, cwd=template_src)
    sha = git("rev-parse", "HEAD", cwd=template_src).strip()
    assert _requirement(project).endswith(f"@ git+file://localhost{bare}@{sha}")
    assert not (project / "vendor").exists()


def test_minimal_and_without_choose_examples_and_extras(tmp_path, template_src):
    project = new_project(
        "lean_exp", tmp_path / "lean_exp", source=template_src, minimal=True,
        without="wandb,sweeps,s3", with_extras="mlflow",
    )  # fmt: skip
    files = _files(project)
    for gone in ("nets/gpt.py", "data/text.py", "conf/model/gpt.yaml", "conf/hparams_search/",
                 "conf/wandb_sweep.yaml", "test_gpt.py"):  # fmt: skip
        assert not [f for f in files if gone in f], gone
    extras = re.fullmatch(r"litforge\[([\w,]+)\]==\S+", _requirement(project))[1].split(",")
    # what its files use (no sweeps, no W&B sweep, no Hugging Face model left), plus --with
    assert set(extras) == {"mlflow", "scaffold"}


# Slow for CI time; make test covers it by a project trains at once (test_a_new_experiment_in_a_project_trains_at_once) and each of its experiments composes (test_public_names).
@pytest.mark.slow
def test_the_projects_own_tests_pass_against_the_installed_litforge(generated):
    result = run_in(generated, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert re.search(r"\d+ passed", result.stdout)


def test_a_new_experiment_in_a_project_trains_at_once(tmp_path, generated):
    project = tmp_path / "copy"
    shutil.copytree(generated, project, ignore=shutil.ignore_patterns(".git", "vendor"))
    made = run_in(project, "-m", "litforge.scaffold", "experiment", "foo", "--model", "--data",
                  "--project", str(project))  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    assert (project / "src" / NAME / "models" / "foo.py").is_file()
    result = run_in(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_foo.py")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
