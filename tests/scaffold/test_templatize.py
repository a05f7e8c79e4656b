"""Source text -> Jinja: rendering with the example package's own name gives back every file."""

from __future__ import annotations

import subprocess

from jinja2.sandbox import SandboxedEnvironment

from litforge.scaffold.parts import EXAMPLE_PACKAGE, is_project_file
from litforge.scaffold.templatize import camel, name_pattern, to_template
from tests.helpers import ROOT

ENV = SandboxedEnvironment(keep_trailing_newline=True)  # copier's default envops


def render(template: str, name: str, **answers) -> str:
    return ENV.from_string(template).render(name=name, name_camel=camel(name), **answers)


def listed() -> list[str]:
    """This repository's files: tracked, or new and not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip
    return [rel for rel in out.splitlines() if (ROOT / rel).is_file()]


def test_every_project_file_renders_back_to_itself():
    checked = 0
    for rel in filter(is_project_file, listed()):
        path = ROOT / rel
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        assert render(to_template(text, EXAMPLE_PACKAGE), EXAMPLE_PACKAGE) == text, rel
        checked += 1
    assert checked > 20


def test_spellings_and_markup():
    pkg = EXAMPLE_PACKAGE
    text = (
        f"import {pkg}.x, litforge  # {pkg.upper()}_RUN_DIR {camel(pkg)}Error\n"
        "a: ${seed} {{ b }} {% raw %}{% endraw %} {#c#} %}\n"
    )
    out = render(to_template(text, pkg), "my_exp")
    assert out == (
        "import my_exp.x, litforge  # MY_EXP_RUN_DIR MyExpError\n"
        "a: ${seed} {{ b }} {% raw %}{% endraw %} {#c#} %}\n"
    )
    assert not name_pattern("my_exp").search("my_experiment MyExperiment")
