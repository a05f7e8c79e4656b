"""Source text -> Jinja: rendering with the template's own name gives back every file."""

from __future__ import annotations

import re
import subprocess

from jinja2.sandbox import SandboxedEnvironment

from litforge.scaffold.parts import PARTS, all_parts, matches
from litforge.scaffold.templatize import Guard, camel, name_pattern, to_template
from tests.helpers import ROOT
from tests.scaffold.conftest import SOURCE

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


def test_every_tracked_text_file_renders_back_to_itself():
    checked = 0
    for rel in listed():
        path = ROOT / rel
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        assert render(to_template(text, SOURCE), SOURCE) == text, rel
        checked += 1
    assert checked > 100


def test_spellings_and_markup():
    text = (
        f"import {SOURCE}.x  # {SOURCE.upper()}_RUN_DIR {camel(SOURCE)}Error\n"
        "a: ${seed} {{ b }} {% raw %}{% endraw %} {#c#} %}\n"
    )
    out = render(to_template(text, SOURCE), "my_exp")
    assert out == (
        "import my_exp.x  # MY_EXP_RUN_DIR MyExpError\n"
        "a: ${seed} {{ b }} {% raw %}{% endraw %} {#c#} %}\n"
    )
    assert not name_pattern("my_exp").search("my_experiment MyExperiment")


def test_guarded_lines_go_or_give_way_to_their_alternative():
    text = "keep\nwandb 1\nwandb 2\nrest\n"
    guard = Guard("'wandb' not in dropped", re.compile(r"^wandb 1", re.M), 2, "other\n")
    template = to_template(text, SOURCE, [guard])
    assert render(template, "x", dropped=[]) == text
    assert render(template, "x", dropped=["wandb"]) == "keep\nother\nrest\n"


def test_every_line_rule_matches_its_file():
    """A rule that no longer matches (its file changed) would silently keep the line."""
    tracked = listed()
    for part in all_parts():
        if not any(matches(g, f, SOURCE) for g in part.files for f in tracked):
            continue  # a part an earlier --without or --minimal left out of this template
        for rule in part.lines:
            path = ROOT / rule.file.replace("{pkg}", SOURCE)
            if not path.exists():
                continue  # a file an earlier --without dropped from this template
            assert re.search(rule.regex, path.read_text(), re.M), (part.name, rule)
    assert set(PARTS) >= {"wandb", "s3", "sweeps"}
