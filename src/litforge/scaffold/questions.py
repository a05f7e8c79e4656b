"""What the template view adds to the source's files: copier.yml (questions, exclusions),
the answers file template, and the origin note at the top of the generated README."""

from __future__ import annotations

from typing import Any

import yaml

from litforge.scaffold.parts import PARTS, Part, all_parts, matches

ANSWERS_FILE = ".copier-answers.yml"
SUBDIR = "template"


def left_out(part: Part) -> str:
    """Jinja condition: the new project leaves `part` out."""
    return f"'{part.name}' in dropped.split(',')"


def kept(part: Part) -> str:
    return f"'{part.name}' not in dropped.split(',')"


def copier_config(source: str, files: list[str], pkg: str, path_template: Any) -> str:
    """copier.yml for a view of `source` whose template holds `files` (source paths)."""
    excludes = []
    for part in all_parts():
        paths = sorted(
            path_template(f) for f in files if any(matches(g, f, pkg) for g in part.files)
        )
        if paths:
            excludes.append("{% if " + left_out(part) + " %}" + "\n".join(paths) + "{% endif %}")
    valid = sorted(PARTS)
    config: dict[str, Any] = {
        "_subdirectory": SUBDIR,
        "_answers_file": ANSWERS_FILE,
        "_templates_suffix": ".jinja",
        "_exclude": excludes,
        "name": {
            "type": "str",
            "help": "package name of the new project (a lower-case Python identifier)",
            "validator": "{% if not (name | regex_search('^[a-z][a-z0-9_]*$')) %}"
            "name must be a lower-case Python identifier{% endif %}",
        },
        "name_camel": {
            "type": "str",
            "default": "{{ name.split('_') | map('capitalize') | join('') }}",
            "when": False,
        },
        "minimal": {
            "type": "bool",
            "default": False,
            "help": "digits example only: no GPT, text data or benchmarks",
        },
        "without": {
            "type": "str",
            "default": "",
            "help": f"optional parts to leave out, comma-separated: {', '.join(valid)}",
            "validator": "{% for p in without.split(',') if p and p not in "
            + repr(valid)
            + " %}unknown part {{ p }} (valid: "
            + ", ".join(valid)
            + "){% endfor %}",
        },
        "dropped": {
            "type": "str",
            "default": "{{ without }}{{ ',gpt' if minimal else '' }}",
            "when": False,
        },
        "source": {
            "type": "str",
            "default": source,
            "help": "path of the template's git repository (where updates come from)",
        },
    }
    return yaml.safe_dump(config, sort_keys=False, width=1000)


ANSWERS_TEMPLATE = (
    "# Where this project came from; `make update-template` reads it. Do not edit by hand.\n"
    "{{ _copier_answers|to_nice_yaml -}}\n"
)

# Inserted after the README's title, in the generated project only.
ORIGIN_START = "> **This project was generated from a template**"
README_ORIGIN = """
> **This project was generated from a template** at `{{ source }}`, version
> `{{ _copier_answers._commit }}`{% if minimal %} (`--minimal`){% endif %}{% if without %}
> (without: `{{ without }}`){% endif %}; the record is `.copier-answers.yml`.
> `make train` trains the default experiment, `make test` runs the tests.
> To take in later template changes, commit your work, then run `make update-template`
> (or `make update-template TEMPLATE=/path/to/template` if it moved); conflicts with your
> edits show as inline conflict markers. `copier update --defaults --trust` does the
> same once the template view is current (`python -m {{ name }}.scaffold view`).
"""
