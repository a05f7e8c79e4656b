"""`experiment NAME [--model] [--data]`: conf/experiment/NAME.yaml and, on request, a model
and a DataModule skeleton with their configs, plus a test; `train.py experiment=NAME
debug=fdr` passes at once."""

from __future__ import annotations

import keyword
import sys
from pathlib import Path

from litforge.scaffold import skeletons
from litforge.scaffold.checks import ScaffoldError, source_name
from litforge.scaffold.parts import EXAMPLE_PACKAGE
from litforge.scaffold.templatize import camel


def project_package(root: Path) -> str:
    """The package a project's code lives in: its pyproject name; in the template itself,
    the example project's package."""
    name = source_name(root)
    return EXAMPLE_PACKAGE if name == "litforge" else name


def planned_files(root: Path, name: str, model: bool, data: bool) -> dict[Path, str]:
    """Path -> content of every file the experiment adds."""
    pkg = project_package(root)
    values = {
        "__PKG__": pkg,
        "__NAME__": name,
        "__MODEL__": f"{camel(name)}Model",
        "__DATA__": f"{camel(name)}DataModule",
        "__MODEL_CONF__": name if model else "cnn",
        "__DATA_CONF__": name if data else "digits",
    }
    files = {
        root / "conf" / "experiment" / f"{name}.yaml": skeletons.EXPERIMENT,
        root / "tests" / f"test_{name}.py": skeletons.TEST + (skeletons.TEST_DATA if data else ""),
    }
    if model:
        files[root / "src" / pkg / "models" / f"{name}.py"] = skeletons.MODEL
        files[root / "conf" / "model" / f"{name}.yaml"] = skeletons.MODEL_CONF
    if data:
        files[root / "src" / pkg / "data" / f"{name}.py"] = skeletons.DATA
        files[root / "conf" / "data" / f"{name}.yaml"] = skeletons.DATA_CONF
    out = {}
    for path, text in files.items():
        for key, value in values.items():
            text = text.replace(key, value)
        out[path] = text
    return out


def check_experiment_name(root: Path, name: str) -> None:
    if not name.isidentifier() or name != name.lower() or name.startswith("_"):
        raise ScaffoldError(f"NAME={name!r}: use a lower-case identifier, e.g. my_task")
    if keyword.iskeyword(name) or name in sys.stdlib_module_names:
        raise ScaffoldError(f"NAME={name} is a Python keyword or module name; pick another")
    if not (root / "conf" / "experiment").is_dir():
        raise ScaffoldError(f"{root} has no conf/experiment/: run this in a project's root")


def new_experiment(root: Path, name: str, model: bool = False, data: bool = False) -> list[Path]:
    """Write the experiment's files; refuse (writing nothing) if any of them exists."""
    root = root.resolve()
    check_experiment_name(root, name)
    files = planned_files(root, name, model, data)
    existing = [str(p.relative_to(root)) for p in files if p.exists()]
    if existing:
        raise ScaffoldError(
            f"experiment {name}: {', '.join(existing)} already exist(s); pick another name "
            "(nothing was written)"
        )
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    shown = " ".join(str(p.relative_to(root)) for p in files)
    print(f"added {shown}\ntry: python train.py experiment={name} debug=fdr", file=sys.stderr)
    return list(files)
