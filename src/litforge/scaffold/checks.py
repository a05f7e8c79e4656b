"""Bad input to the scaffold commands, each refused with one line before anything is written."""

from __future__ import annotations

import importlib.util
import keyword
import re
import shutil
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from litforge.errors import LitforgeError
from litforge.paths import unwritable

# Import names that differ from their distribution names in pyproject's dependencies.
_IMPORT_NAMES = {"hydra-core": "hydra", "scikit-learn": "sklearn", "mlflow-skinny": "mlflow"}
# Always shadowed by a package of that name on sys.path, whatever pyproject lists.
_ALWAYS = {"torch", "lightning", "hydra", "omegaconf", "numpy", "copier", "pytest", "tests"}


class ScaffoldError(LitforgeError, ValueError):
    """A scaffold command cannot do what was asked; nothing was written."""

    exit_code = 2


def read_pyproject(root: Path) -> dict:
    path = root / "pyproject.toml"
    if not path.is_file():
        raise ScaffoldError(f"{root} has no pyproject.toml: not a project made from this template")
    with path.open("rb") as f:
        return tomllib.load(f)


def source_name(root: Path) -> str:
    """The package name of the template at `root` (`[project] name` of its pyproject.toml)."""
    name = read_pyproject(root).get("project", {}).get("name", "")
    if not name.isidentifier():
        raise ScaffoldError(f"{root}/pyproject.toml: [project] name={name!r} is not a package name")
    return name


def dependency_names(root: Path) -> set[str]:
    """Import names of every dependency (main and optional) in pyproject.toml."""
    project = read_pyproject(root).get("project", {})
    specs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        specs.extend(extra)
    names = set()
    for spec in specs:
        dist = re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0].lower()
        names.add(_IMPORT_NAMES.get(dist, dist.replace("-", "_")))
    return names


def check_name(name: str, root: Path, what: str = "NAME") -> None:
    """A new package name must be a lower-case identifier that shadows nothing it imports."""
    if not name.isidentifier():
        raise ScaffoldError(f"{what}={name!r} is not a Python identifier (letters, digits, _)")
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise ScaffoldError(f"{what}={name} is a Python keyword; pick another name")
    if name != name.lower() or name.startswith("_"):
        raise ScaffoldError(f"{what}={name}: use lower case without a leading _, e.g. my_exp")
    if name in (source_name(root), "litforge_examples"):
        raise ScaffoldError(f"{what}={name} is the template's own name; pick a new one")
    shadowed = _ALWAYS | dependency_names(root) | set(sys.stdlib_module_names)
    # Any importable top-level module: `yaml` is PyYAML's, which no dependency is named.
    if name in shadowed or _installed(name):
        raise ScaffoldError(
            f"{what}={name} would shadow the installed module `{name}` (a dependency, the "
            "standard library or another installed package); pick another name"
        )


def _installed(name: str) -> bool:
    """An importable module or regular package (a bare directory in the working directory,
    a namespace package, does not count)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin not in (None, "namespace")


def check_dest(dest: Path, root: Path, force: bool) -> None:
    """DEST outside the template, empty unless --force, and writable."""
    dest, root = dest.resolve(), root.resolve()
    if dest == root or dest.is_relative_to(root):
        raise ScaffoldError(f"DEST={dest} is inside the template {root}; choose a path outside it")
    if root.is_relative_to(dest):
        raise ScaffoldError(f"DEST={dest} contains the template {root}; choose another path")
    if dest.exists() and not dest.is_dir():
        raise ScaffoldError(f"DEST={dest} is a file")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise ScaffoldError(f"DEST={dest} is not empty; pass --force to replace its content")
    # The project is built beside DEST, then moved there (replacing DEST, if it exists).
    problem = (dest.exists() and unwritable(dest)) or unwritable(dest.parent)
    if problem:
        raise ScaffoldError(
            f"DEST={dest} is not writable ({problem}); choose a directory you can write to"
        )


def require_git() -> str:
    git = shutil.which("git")
    if git is None:
        raise ScaffoldError(
            "no `git` executable on PATH: install git (templates are versioned in git)"
        )
    return git
