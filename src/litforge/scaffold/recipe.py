"""`litforge recipe copy`: the training recipe copied into a project, which then owns its
loop, in the manner of torchtune's `tune cp`. The copy is `recipe.py` beside `train.py`,
and `train.py` imports `train` from it instead of from litforge. The copy names only
`litforge.steps` (public), so moving the pin keeps it running; `make update-template`
never touches it (it is no template file) and says so."""

from __future__ import annotations

import difflib
import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from litforge.scaffold.checks import ScaffoldError

RECIPE_FILE = "recipe.py"
HEADER_START = "# Copied from litforge "  # the first of the copy's two header lines
LIBRARY_IMPORT = "from litforge import entry_point, train\n"
OWN_IMPORT = (
    "from litforge import entry_point\n\n"
    "from recipe import train  # this project's own loop (litforge recipe copy)\n"
)


def library_recipe() -> str:
    """The source of litforge.training, read from the installed library (not imported)."""
    spec = importlib.util.find_spec("litforge.training")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).read_text()


def copy_recipe(project: Path, force: bool = False) -> Path:
    """Write `project/recipe.py` and point `project/train.py` at it; the copy's path."""
    entry, dest = project / "train.py", project / RECIPE_FILE
    if not entry.is_file():
        raise ScaffoldError(f"{project} has no train.py: run this in a project (or --project DIR)")
    if dest.exists() and not force:
        raise ScaffoldError(f"{dest} exists (an earlier copy, and yours); --force replaces it")
    script = entry.read_text()
    if LIBRARY_IMPORT not in script and OWN_IMPORT not in script:
        raise ScaffoldError(
            f"{entry} does not import train from litforge ({LIBRARY_IMPORT.strip()!r}); "
            f"point it at {RECIPE_FILE} yourself after copying, or restore that line"
        )
    try:
        pinned = version("litforge")
    except PackageNotFoundError:
        pinned = "unknown"
    header = (
        f"{HEADER_START}{pinned}'s litforge/training.py by `litforge recipe copy`.\n"
        "# It is this project's now: edit it freely; `make update-template` leaves it alone.\n"
    )
    dest.write_text(header + library_recipe())
    entry.write_text(script.replace(LIBRARY_IMPORT, OWN_IMPORT))
    print(f"copied the training recipe to {dest}; train.py now runs it", flush=True)
    return dest


def note_own_recipe(project: Path) -> str | None:
    """After an update: the line saying a copied recipe was left as it is (None without one)."""
    if not (project / RECIPE_FILE).is_file():
        return None
    return (
        f"left {RECIPE_FILE} alone: it is your copy of the training recipe; the new pin's own "
        "is litforge/training.py (`litforge recipe diff` shows what changed)"
    )


def diff_recipe(project: Path) -> str:
    """A unified diff from the installed litforge's recipe to the project's copy."""
    dest = project / RECIPE_FILE
    if not dest.is_file():
        raise ScaffoldError(f"{dest} does not exist: `litforge recipe copy` makes it")
    own = dest.read_text().splitlines(keepends=True)
    if own and own[0].startswith(HEADER_START):
        own = own[2:]
    lines = difflib.unified_diff(
        library_recipe().splitlines(keepends=True), own, "litforge/training.py", RECIPE_FILE
    )
    return "".join(lines)
