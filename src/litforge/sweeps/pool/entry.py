"""How a trial's process runs the Hydra app: the command line before its overrides.

Usually the program that started the sweep is the app's own script (`python train.py -m`,
`python -m pkg.app -m`), and a trial runs it again. A sweep started in-process (a test
calling the app's `hydra.main` function from pytest, a notebook) was started by another
program: running that again would run pytest. Then the trial imports the module that
defines the app's entry function and calls it; with no such module-level function, the
sweep stops in one line before any trial starts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from litforge.errors import ConfigError

# The trial's program when the sweep was started in-process: import MODULE from ROOT and
# call its NAME, with sys.argv[0] the module's file (Lightning runs that for DDP ranks).
_BOOT = (
    "import importlib, sys\n"
    "root, module, name, script = sys.argv[1:5]\n"
    "sys.argv = [script, *sys.argv[5:]]\n"
    "sys.path.insert(0, root)\n"
    "getattr(importlib.import_module(module), name)()\n"
)


def unwrapped(task_function: Callable[..., Any]) -> list[Callable[..., Any]]:
    """The app's own task function first, then what wraps it: a sweeper may pass Hydra's
    launcher a partial (litforge's Optuna sweeper: partial(run_trial, task function))."""
    if not isinstance(task_function, functools.partial):
        return [task_function]
    inner = [a for a in task_function.args if callable(a)]
    return [*(unwrapped(inner[0]) if inner else []), *unwrapped(task_function.func)]


def runs_app(candidate: Any, tasks: list[Callable[..., Any]]) -> bool:
    """Whether calling `candidate()` runs the app of one of `tasks`: it is Hydra's wrapper
    of it (`hydra.main`), or a function that calls one (litforge's entry_point)."""
    if not callable(candidate):
        return False
    held = [getattr(candidate, "__wrapped__", None)]
    for cell in getattr(candidate, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            held.append(cell.cell_contents)
    return any(h is t for h in held for t in tasks)


def _defines_app(module: types.ModuleType, tasks: list[Callable[..., Any]]) -> str | None:
    """The name of `module`'s function that runs the app, if it has one."""
    for name, value in list(vars(module).items()):
        if type(value) is types.FunctionType and runs_app(value, tasks):  # no __class__ hooks
            return name
    return None


def entry_command(task_function: Callable[..., Any] | None) -> list[str]:
    """The trial's program: this process's own (its script, its -m module) when that runs
    the app; else the module that defines the app's entry function, imported."""
    import __main__

    spec = getattr(__main__, "__spec__", None)
    if spec is not None and spec.name:
        own: list[str] | None = [sys.executable, "-m", spec.name]
    elif sys.argv and os.path.isfile(sys.argv[0]):
        own = [sys.executable, os.path.abspath(sys.argv[0])]
    else:  # `python -c`, a notebook: no program to run again
        own = None
    if task_function is None:
        return own or [sys.executable, *sys.argv[:1]]
    tasks = unwrapped(task_function)
    app = tasks[0]
    mains = any(t.__module__ == "__main__" for t in tasks) or _defines_app(__main__, tasks)
    if own is not None and mains:
        return own
    home = sys.modules.get(app.__module__)  # the app's own module first
    for module in [home, *(m for m in list(sys.modules.values()) if m is not home)]:
        if module is __main__ or not isinstance(module, types.ModuleType):
            continue
        file = getattr(module, "__file__", None)
        name = _defines_app(module, tasks) if file else None
        if name is not None:
            root = _import_root(Path(file), module.__name__)
            return [sys.executable, "-c", _BOOT, str(root), module.__name__, name, file]
    argv0 = sys.argv[0] if sys.argv else ""
    started_by = (
        spec.name if spec is not None and spec.name
        else "python -c" if argv0 == "-c" else argv0 or "an interactive python"
    )  # fmt: skip
    raise ConfigError(
        f"hydra/launcher=gpus: this sweep was started by {started_by}, not by the app's own "
        f"script, and no module defines a function that runs the app "
        f"({app.__module__}.{getattr(app, '__qualname__', app)}); start it as "
        "`python your_app.py -m ...`"
    )


def _import_root(file: Path, module: str) -> Path:
    """The sys.path entry `module` (defined in `file`) imports from."""
    depth = module.count(".") + (1 if file.stem == "__init__" else 0)
    return file.absolute().parents[depth]
