"""`new-project`: the template's example project under a new name, litforge pinned, in a
fresh git repository; `update`: move the pin and take in the template's changes to the
project's skeleton files (copier's three-way merge)."""

from __future__ import annotations

import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import yaml

from litforge.scaffold import gitio, view
from litforge.scaffold.checks import ScaffoldError, check_dest, check_name, require_git
from litforge.scaffold.parts import ALWAYS, parse_with, parse_without
from litforge.scaffold.questions import ANSWERS_FILE
from litforge.scaffold.recipe import note_own_recipe


def template_root() -> Path:
    """The repository this package was installed from (src/litforge/scaffold/ -> root)."""
    return Path(__file__).resolve().parents[3]


def default_template() -> Path:
    """Where the project in the working directory came from (its answers file), else the
    repository litforge was installed from."""
    here = Path.cwd()
    if (here / ANSWERS_FILE).is_file():
        return Path(read_answers(here).get("source") or here)
    return template_root()


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _copier():
    """copier, imported late (it is slow to import) and quiet about its own warnings."""
    warnings.filterwarnings("ignore", module="copier")
    import copier

    return copier


def new_project(
    name: str,
    dest: Path,
    source: Path | None = None,
    minimal: bool = False,
    without: str = "",
    force: bool = False,
    with_extras: str = "",
) -> Path:
    """Generate project `name` at `dest` from the template at `source` (default: this one).
    It depends on the litforge extras its files use, plus `with_extras`, less `without`."""
    require_git()
    source = gitio.toplevel(source or template_root())
    check_name(name, source)
    try:
        parts = parse_without(without)
        added = parse_with(with_extras)
    except ValueError as err:
        raise ScaffoldError(str(err)) from None
    dest = dest.expanduser().resolve()
    check_dest(dest, source, force)
    pending = gitio.uncommitted(source)
    if pending:
        _say(
            f"note: {len(pending)} uncommitted change(s) in {source} are not included "
            f"(e.g. {pending[0]}); the project is made from the last commit"
        )
    built = view.build(source)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        _copier().run_copy(
            str(built.path),
            work,
            data={
                "name": name,
                "minimal": minimal,
                "without": ",".join(parts),
                "with_extras": ",".join(added),
            },  # fmt: skip
            vcs_ref=built.tag,
            defaults=True,
            overwrite=True,
            unsafe=True,
            quiet=True,
        )
        _remove_empty_dirs(work)  # left by excluded files; git would not keep them anyway
        gitio.git("init", "-q", "-b", "main", cwd=work)
        gitio.commit_all(work, f"New project {name} from template {built.tag}")
        if dest.exists():
            shutil.rmtree(dest)
        work.rename(dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    _say(f"created {dest} from {source} at {built.tag}; next: cd {dest} && make test")
    return dest


def _remove_empty_dirs(root: Path) -> None:
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
            path.rmdir()


def read_answers(project: Path) -> dict:
    path = project / ANSWERS_FILE
    if not path.is_file():
        raise ScaffoldError(
            f"{project} has no {ANSWERS_FILE}: it was not generated from a template "
            "(a plain copy cannot be updated)"
        )
    return yaml.safe_load(path.read_text()) or {}


def update(project: Path, template: Path | None = None, conflict: str = "inline") -> str:
    """Bring template changes since the recorded version into `project`; the new tag."""
    require_git()
    project = gitio.toplevel(project)
    answers = read_answers(project)
    if gitio.is_dirty(project):
        raise ScaffoldError(
            f"{project} has uncommitted changes; commit or stash them first (the update "
            "is a three-way merge against your last commit)"
        )
    missing = [k for k in ("source", "_commit", "_src_path") if not answers.get(k)]
    if missing:
        raise ScaffoldError(f"{project / ANSWERS_FILE} lacks {', '.join(missing)}: cannot update")
    recorded, old_tag = Path(answers["source"]), answers["_commit"]
    old_view = Path(answers["_src_path"]).expanduser()
    if not template and not (recorded / ".git").exists():
        raise ScaffoldError(
            f"the template {recorded} is gone; pass its new place: "
            "make update-template TEMPLATE=/path/to/template"
        )
    source = gitio.toplevel(template or recorded)
    # The recorded version must resolve in the recorded view: rebuild it if the cache went.
    old_source = recorded if (recorded / ".git").exists() else source
    view.build(old_source, view.sha_of_tag(old_tag), view=old_view)
    new = view.build(source)
    if new.tag == old_tag:
        _say(f"{project} is at the template's latest version {new.tag}; nothing to do")
        return new.tag
    data = {"source": str(source)} if template is not None else {}
    # An update never drops an extra the project depends on now (one made when the template
    # depended on every extra, or on `hf` by default, keeps them): they become `--with`.
    kept = [e for e in _required_extras(project) if e not in ALWAYS]
    added = [e for e in (answers.get("with_extras") or "").split(",") if e]
    if set(kept) - set(added):
        data["with_extras"] = ",".join(dict.fromkeys(added + kept))
    copier = _copier()
    # copier.run_update takes no src_path (a template that moved); its Worker does, and
    # copier 9.19 marks importing it from `copier` as deprecated.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Importing `Worker` from `copier`")
        worker_class = copier.Worker
    with worker_class(
        src_path=str(new.path) if new.path != old_view else None,
        dst_path=project,
        data=data,
        vcs_ref=new.tag,
        defaults=True,
        overwrite=True,
        unsafe=True,
        quiet=True,
        conflict=conflict,
    ) as worker:
        worker.run_update()
    _settle_pin_conflict(project / "pyproject.toml")
    _say(
        f"updated {project} from {old_tag} to {new.tag}; review with `git diff`, resolve any "
        "conflict markers, then commit"
    )
    own = note_own_recipe(project)
    if own:
        _say(own)
    return new.tag


def _settle_pin_conflict(pyproject: Path) -> None:
    """An extra the user added to the litforge pin by hand (as a project's missing-extra line
    says to) and the template's moved pin change the same line: a conflict only in form,
    since the moved pin already carries the project's extras (`update` passes them on).
    Take the moved pin where it holds every extra of the user's line; leave any other
    conflict to the user."""
    import re

    text = pyproject.read_text()
    pin = r'\s*"litforge\[([\w,\s-]*)\][^"\n]*",?\n'
    block = re.compile(rf"<<<<<<< before updating\n({pin})=======\n({pin})>>>>>>> after updating\n")

    def theirs_if_it_keeps_ours(found: re.Match[str]) -> str:
        ours, theirs = (set(e.strip() for e in found[i].split(",")) for i in (2, 4))
        return found[3] if ours <= theirs else found[0]

    settled = block.sub(theirs_if_it_keeps_ours, text)
    if settled != text:
        pyproject.write_text(settled)


def _required_extras(project: Path) -> list[str]:
    """The extras in the `litforge[...]` requirement of the project's pyproject.toml."""
    import re

    from litforge.scaffold.parts import EXTRAS

    found = re.search(r"litforge\[([\w,\s-]*)\]", (project / "pyproject.toml").read_text())
    names = [n.strip() for n in found.group(1).split(",")] if found else []
    return [n for n in names if n in EXTRAS]
