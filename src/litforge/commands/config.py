"""`litforge config [GROUP]`: every litforge key with its type, default and doc.

The same schemas write, with `--write`, the YAML files Hydra composes the defaults from
(litforge/conf/checkpoint/default.yaml, litforge/conf/litforge/settings.yaml, ...) and
docs/config-reference.md; `--check` exits 1 when one of them is stale (a test runs it).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

from litforge.settings import Settings, all_schemas

CONF = Path(__file__).resolve().parents[1] / "conf"
GENERATED = (
    "# Generated from litforge's schemas by `litforge config --write`: edit the schema, not this.\n"
)
# Lines a generated file starts with, beyond the notice (Hydra reads the package line).
HEADERS = {
    "litforge/settings.yaml": "# @package _global_\n",
    "litforge/eval_settings.yaml": "# @package _global_\n",
}
REFERENCE = "docs/config-reference.md"


def scalar(value: Any) -> str:
    """A value as YAML writes it on one line."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, 96 - len(indent))]


def _node_name(schema: type[Settings]) -> str:
    """The node a schema's file nests its keys under ("" for none): NODE, else the GROUP
    unless the file's place in conf/ is the group (checkpoint/default.yaml)."""
    if schema.NODE is not None:
        return schema.NODE
    in_place = (schema.GROUP_FILE or "").startswith(schema.GROUP + "/")
    return "" if not schema.GROUP or in_place else schema.GROUP


def _opening(schema: type[Settings]) -> list[str]:
    """HEADER's lines as they are written, else the docstring wrapped."""
    if schema.HEADER is None:
        return _comment(" ".join((schema.__doc__ or "").split()), "")
    return [f"# {line}".rstrip() for line in schema.HEADER.strip("\n").splitlines()]


def group_yaml(schemas: list[type[Settings]]) -> str:
    """One generated YAML file: each schema's node, each key under its doc."""
    lines: list[str] = []
    for schema in schemas:
        node = _node_name(schema)
        indent = "  " if node else ""
        lines += _opening(schema)
        if node:
            lines.append(f"{node}:")
        if schema.TARGET is not None:
            lines.append(f"{indent}_target_: {schema.TARGET}")
        if schema.RECURSIVE is not None:
            lines.append(f"{indent}_recursive_: {scalar(schema.RECURSIVE)}")
        for info in schema.infos():
            name = info.name.removeprefix(f"{schema.GROUP}.") if schema.GROUP else info.name
            lines += _comment(f"{info.doc} [{info.type}]", indent)
            lines.append(f"{indent}{name}: {scalar(info.default)}")
    return "\n".join(lines) + "\n"


def generated_files() -> dict[str, str]:
    """Path (under litforge/conf/) -> text, for every schema with a GROUP_FILE."""
    by_file: dict[str, list[type[Settings]]] = {}
    for schema in all_schemas():
        if schema.GROUP_FILE:
            by_file.setdefault(schema.GROUP_FILE, []).append(schema)
    return {
        path: HEADERS.get(path, "") + GENERATED + group_yaml(schemas)
        for path, schemas in by_file.items()
    }


def reference() -> str:
    """docs/config-reference.md: every key of every schema."""
    lines = [
        "# Config reference",
        "",
        "Every key litforge itself reads, generated from its schemas (`litforge config --write`;",
        "a test fails when this page is stale). `litforge config GROUP` prints one group. The",
        "keys of your own groups (`model`, `data`, `_target_` callbacks and loggers) are the",
        "arguments of the classes they build; `trainer.*` are Lightning's Trainer arguments.",
        "",
    ]
    for schema in all_schemas():
        where = f"`{schema.GROUP_FILE}`" if schema.GROUP_FILE else "the option or experiment picked"
        built = f"The keyword arguments of `{schema.TARGET}`. " if schema.TARGET else ""
        lines += [f"## {schema.TITLE}", "", " ".join((schema.__doc__ or "").split()),
                  f"{built}Defaults from {where}.", ""]  # fmt: skip
        lines += ["| key | valid | default | what it does |", "|---|---|---|---|"]
        for info in schema.infos():
            cells = (f"`{info.name}`", info.type, f"`{scalar(info.default)}`", info.doc)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def listing(group: str | None) -> str:
    schemas = [s for s in all_schemas() if group in (None, s.GROUP, s.TITLE.split()[0])]
    if not schemas:
        names = sorted({s.GROUP or s.TITLE for s in all_schemas()})
        raise SystemExit(f"error: no litforge config group {group!r}; groups: {', '.join(names)}")
    out = []
    for schema in schemas:
        out.append(f"{schema.TITLE}: {' '.join((schema.__doc__ or '').split())}")
        for info in schema.infos():
            out.append(f"  {info.name} = {scalar(info.default)}  [{info.type}]")
            out.append(f"      {info.doc}")
    return "\n".join(out)


def stale(root: Path) -> list[str]:
    """The generated files (conf YAML, the reference under `root`) that differ from the
    schemas."""
    found = [f"litforge/conf/{p}" for p, text in generated_files().items()
             if not (CONF / p).is_file() or (CONF / p).read_text() != text]  # fmt: skip
    page = root / REFERENCE
    if page.parent.is_dir() and (not page.is_file() or page.read_text() != reference()):
        found.append(REFERENCE)
    return found


def write(root: Path) -> None:
    for path, text in generated_files().items():
        (CONF / path).write_text(text)
    if (root / "docs").is_dir():
        (root / REFERENCE).write_text(reference())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="litforge config", description=__doc__.split("\n")[0])
    parser.add_argument("group", nargs="?", help="one group, e.g. checkpoint (default: all)")
    parser.add_argument("--write", action="store_true", help="rewrite the generated YAML and docs")
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    args = parser.parse_args(argv)
    root = Path.cwd()
    if (args.write or args.check) and (root / "src" / "litforge" / "conf").resolve() != CONF:
        # Elsewhere (a project, an installed wheel) they would rewrite the installed package.
        print(
            "error: --write and --check regenerate litforge's own files: run them in the "
            f"litforge repository whose package is imported ({CONF.parents[2]})",
            file=sys.stderr,
        )
        return 2
    if args.write:
        write(root)
        return 0
    if args.check:
        found = stale(root)
        for path in found:
            print(f"stale: {path} (run `litforge config --write`)", file=sys.stderr)
        return 1 if found else 0
    print(listing(args.group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
