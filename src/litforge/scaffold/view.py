"""The copier template *view* of the template repository: its example project (package,
configs, tests, entry scripts) with the example package's name turned into `{{ name }}`, the
skeleton files of `project_files/`, and litforge pinned to the source commit (its git remote,
or a wheel in `vendor/`), in a git repository of its own with one tagged commit per source
commit. The source stays a plain repository (no Jinja in it).

The view lives at `$XDG_CACHE_HOME/<name>/template-view/<hash of the source path>` (default
`~/.cache`); its tags are `v<version>.post<commits>+g<sha>` (PEP 440), so the tag of a source
commit is always the same and a project's recorded `_commit` can be rebuilt when missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from litforge.scaffold import gitio, pin
from litforge.scaffold.checks import ScaffoldError
from litforge.scaffold.parts import EXAMPLE_PACKAGE, is_project_file
from litforge.scaffold.questions import ANSWERS_FILE, ANSWERS_TEMPLATE, SUBDIR, copier_config
from litforge.scaffold.templatize import mentions, path_template, to_template

# project_files/ name -> its path in a new project (templates keep their .jinja suffix).
SKELETONS = {
    "pyproject.toml.jinja": "pyproject.toml.jinja",
    "Makefile.jinja": "Makefile.jinja",
    "README.md.jinja": "README.md.jinja",
    "gitignore": ".gitignore",
    "ci_run": ".ci/run",
    "tests_init.py": "tests/__init__.py",
    "tests_conftest.py": "tests/conftest.py",
}
PROJECT_FILES_DIR = Path(__file__).with_name("project_files")
SKELETONS_IN_REPO = "src/litforge/scaffold/project_files"
TAG = re.compile(r"^v(?P<version>.+)\.post(?P<count>\d+)\+g(?P<sha>[0-9a-f]{12})$")


@dataclass(frozen=True)
class View:
    path: Path  # the view's git repository
    tag: str  # the tag of the requested source commit
    sha: str  # that source commit


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def view_path(source: Path, name: str) -> Path:
    """One view per template checkout and remote (the remote decides how litforge is pinned)."""
    key = f"{source.resolve()}\n{pin.remote_url(source) or ''}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / name / "template-view" / digest


def tag_for(version: str, count: int, sha: str) -> str:
    return f"v{version}.post{count}+g{sha[:12]}"


def sha_of_tag(tag: str) -> str:
    match = TAG.match(tag)
    if match is None:
        raise ScaffoldError(f"template version {tag!r} was not made by this scaffold")
    return match["sha"]


def _project(files: dict[str, tuple[bytes, int]]) -> dict:
    if "pyproject.toml" not in files:
        raise ScaffoldError("the template commit has no pyproject.toml")
    return tomllib.loads(files["pyproject.toml"][0].decode())["project"]


def _clear_outputs(content: bytes) -> bytes:
    notebook = json.loads(content)
    changed = False
    for cell in notebook.get("cells", []):
        if cell.get("outputs") or cell.get("execution_count"):
            cell["outputs"], cell["execution_count"] = [], None
            changed = True
    if not changed:
        return content
    return (json.dumps(notebook, indent=1, ensure_ascii=False) + "\n").encode()


def render_files(files: dict[str, tuple[bytes, int]], pkg: str) -> dict[str, tuple[bytes, int]]:
    """Template path -> (content, mode) for the view's `template/` directory: the example
    project's files with `pkg` (the example package) turned into `{{ name }}`, and the
    skeleton files."""
    out: dict[str, tuple[bytes, int]] = {}
    for path, (content, mode) in sorted(files.items()):
        if not is_project_file(path):
            continue
        if path.startswith("notebooks/") and path.endswith(".ipynb"):
            content = _clear_outputs(content)
        target = path_template(path, pkg)
        try:
            text = content.decode()
        except UnicodeDecodeError:
            out[target] = (content, mode)
            continue
        if mentions(text, pkg) or path.endswith(".jinja") or "{{" in text or "{%" in text:
            out[target + ".jinja"] = (to_template(text, pkg).encode(), mode)
        else:
            out[target] = (content, mode)
    for name, target in SKELETONS.items():
        # The template commit's own skeletons (an update compares two commits' views).
        committed = files.get(f"{SKELETONS_IN_REPO}/{name}")
        if committed is None:
            local = PROJECT_FILES_DIR / name
            committed = (local.read_bytes(), local.stat().st_mode)
        out[target] = committed
    return out


def _tags(view: Path) -> set[str]:
    return set(str(gitio.git("tag", "--list", cwd=view)).split())


def _init(view: Path) -> None:
    if (view / ".git").is_dir():
        return
    view.mkdir(parents=True, exist_ok=True)
    gitio.git("init", "-q", "-b", "main", cwd=view)
    gitio.git("config", "commit.gpgsign", "false", cwd=view)
    gitio.git("config", "tag.gpgsign", "false", cwd=view)


def build(source: Path, ref: str = "HEAD", view: Path | None = None) -> View:
    """The view holding source commit `ref` (built and tagged unless it already is)."""
    source = gitio.toplevel(source)
    sha = gitio.rev(source, ref)
    files = gitio.tree_files(source, sha)
    project = _project(files)
    library, pkg = project["name"], EXAMPLE_PACKAGE
    tag = tag_for(project.get("version", "0.0.0"), gitio.commit_count(source, sha), sha)
    view = view or view_path(source, library)
    entries = [e for e in view.iterdir() if e.name != ".git"] if view.is_dir() else []
    if entries and not (view / "copier.yml").is_file():
        raise ScaffoldError(f"{view} is not a template view (no copier.yml); not touching it")
    _init(view)
    if tag in _tags(view):
        return View(view, tag, sha)
    for entry in entries:
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    pinned = pin.pin_for(source, sha, tag[1:], files)
    rendered = render_files(files, pkg)
    if pinned.wheel is not None:
        wheel_name, wheel = pinned.wheel
        rendered[f"vendor/{wheel_name}"] = (wheel, 0o644)
    for rel, (content, mode) in rendered.items():
        target = view / SUBDIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode & 0o777 | 0o600)
    answers = view / SUBDIR / "{{ _copier_conf.answers_file }}.jinja"
    answers.write_text(ANSWERS_TEMPLATE)
    config = copier_config(str(source), lambda p: path_template(p, pkg), pinned)
    (view / "copier.yml").write_text(config)
    date = str(gitio.git("show", "-s", "--format=%cI", sha, cwd=source)).strip()
    gitio.commit_all(view, f"template view of {source} at {sha}", date=date)
    gitio.git("tag", tag, cwd=view)
    return View(view, tag, sha)


__all__ = ["ANSWERS_FILE", "View", "build", "cache_root", "sha_of_tag", "view_path"]
