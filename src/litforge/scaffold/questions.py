"""What the template view adds to the example project: copier.yml (questions, exclusions,
what an update leaves alone) and the answers file template."""

from __future__ import annotations

from typing import Any

import yaml

from litforge.scaffold.parts import ALWAYS, EXTRAS, GPT_FILES, Extra, used_extras
from litforge.scaffold.pin import pip_url

ANSWERS_FILE = ".copier-answers.yml"
SUBDIR = "template"
# The user's own files: written once by new-project, never by update-template.
USERS_OWN = ("src/{{ name }}", "tests/{{ name }}", "conf/data", "conf/model",
             "conf/experiment", "conf/hparams_search", "conf/wandb_sweep.yaml", "notebooks")  # fmt: skip


def _left_out(extra: Extra) -> str:
    return f"'{extra.name}' in without.split(',')"


def copier_config(source: str, template_path: Any, pin: Any) -> str:
    """copier.yml for a view of `source`; `template_path` maps a source path to the view's."""
    excludes = [
        "{% if minimal %}" + "\n".join(template_path(p) for p in GPT_FILES) + "{% endif %}",
        "{% if _copier_operation == 'update' %}" + "\n".join(USERS_OWN) + "{% endif %}",
    ]
    for extra in EXTRAS.values():
        if extra.files:
            paths = "\n".join(template_path(p).rstrip("/*") for p in extra.files)
            excludes.append("{% if " + _left_out(extra) + " %}" + paths + "{% endif %}")
    valid = sorted(EXTRAS)
    # The extras the project's files use (fewer with --minimal), plus --with, less --without.
    used = f"({used_extras(True)!r} if minimal else {used_extras(False)!r})"
    loop = (
        "{% for e in "
        + repr(list(EXTRAS))
        + " if e not in without.split(',') and (e in with_extras.split(',') or e in "
        + used
        + ") %}{{ e }},{% endfor %}"
    )
    requirement = (
        f"litforge[{{{{ extras }}}}] @ git+{pip_url(pin.git_url)}@{pin.sha}"
        if pin.git_url
        else f"litforge[{{{{ extras }}}}]=={pin.version}"
    )
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
        "minimal": {"type": "bool", "default": False, "help": "the digits example only"},
        "without": {
            "type": "str",
            "default": "",
            "help": f"litforge extras not to depend on, comma-separated: {', '.join(valid)}",
            "validator": "{% for p in without.split(',') if p and p not in "
            + repr(valid)
            + " %}unknown extra {{ p }} (valid: "
            + ", ".join(valid)
            + "){% endfor %}",
        },
        "with_extras": {
            "type": "str",
            "default": "",
            "help": f"litforge extras to depend on beyond those its files use: {', '.join(valid)}",
            "validator": "{% for p in with_extras.split(',') if p and p not in "
            + repr(valid)
            + " %}unknown extra {{ p }} (valid: "
            + ", ".join(valid)
            + "){% endfor %}",
        },
        "extras": {"type": "str", "default": loop + ",".join(ALWAYS), "when": False},
        "litforge_version": {"type": "str", "default": pin.version, "when": False},
        "litforge_requirement": {"type": "str", "default": requirement, "when": False},
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
