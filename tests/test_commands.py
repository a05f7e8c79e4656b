"""`litforge COMMAND`: one name for every command, each the same as its `python -m` form."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from litforge.commands import COMMANDS, main
from tests.helpers import ROOT


def litforge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "litforge.commands", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_help_lists_every_command_on_one_screen():
    shown = litforge("--help")
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert len(lines) <= 24
    for name in ("budget", "plan", "export", "consolidate", "matmul-bench", "new-project",
                 "update-template", "recipe"):  # fmt: skip
        assert any(line.split()[:1] == [name] for line in lines), name
    assert litforge().returncode == 2  # no command: the same list, as a usage error


def test_an_unknown_command_is_one_line():
    wrong = litforge("bugdet")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert wrong.stderr.startswith("error: unknown command 'bugdet'; commands: budget, plan")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_reaches_its_own_help(name, capsys):
    with pytest.raises(SystemExit) as ended:
        main([name, "--help"])
    assert ended.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


def test_the_console_script_is_installed():
    script = Path(sys.executable).parent / "litforge"
    assert script.is_file(), "pip install -e . writes it ([project.scripts])"
    shown = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "matmul-bench" in shown.stdout


ALIASES = ["budget", "plan", "matmul_bench", "consolidate"]
# Each `python -m litforge.NAME --help`, in one process (runpy, as -m runs them): the
# imports are paid once, not four times.
HELP_OF_EACH = """import contextlib, io, json, runpy, sys
shown = {}
for name in sys.argv[1:]:
    out, sys.argv = io.StringIO(), [name, "--help"]
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_module(f"litforge.{name}", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            code = stop.code
    shown[name] = [code, out.getvalue()[:6]]
print(json.dumps(shown))
"""


def test_the_old_python_m_names_are_aliases_of_a_few_lines():
    for old in ALIASES:
        alias = ROOT / "src" / "litforge" / f"{old}.py"
        assert len(alias.read_text().splitlines()) <= 12, f"{alias.name} holds code again"
    done = subprocess.run([sys.executable, "-c", HELP_OF_EACH, *ALIASES], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown == {old: [0, "usage:"] for old in ALIASES}, shown


def test_the_readme_lists_every_command():
    import re

    readme = (ROOT / "README.md").read_text()
    listed = re.search(r"`\.venv/bin/litforge --help` lists them:\s*([^)]*)\)", readme)
    assert listed is not None
    assert {name.strip() for name in listed.group(1).split(",")} == set(COMMANDS)
