"""Plain source text -> Jinja template text: the package name becomes `{{ name }}`, everything
else is kept verbatim.

Verbatim text that Jinja could misread (`{{`, `{%`, `{#`, `${...}`) goes inside raw blocks, so
rendering the template with the source's own name gives back the source byte for byte.
"""

from __future__ import annotations

import re

# Jinja markup a raw block passes through: the tag that would end the block cannot.
_SPECIAL = re.compile(r"[{}%#]")
_ENDRAW = re.compile(r"\{%[-+]?\s*endraw\s*[-+]?%\}")
RAW_OPEN, RAW_CLOSE = "{%" + " raw " + "%}", "{%" + " endraw " + "%}"


def camel(name: str) -> str:
    """`my_exp` -> `MyExp`: the form the name takes in class names (`MyExpModule`)."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def name_pattern(name: str) -> re.Pattern[str]:
    """The name's three spellings (`litforge`, `LITFORGE`, `Litforge`) as whole identifier
    parts: `litforge_optuna` and `LitforgeModule` match, `my_experiment` does not match
    `my_exp`."""
    forms = sorted({name, name.upper(), camel(name)}, key=len, reverse=True)
    alternatives = "|".join(re.escape(f) for f in forms)
    return re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives})(?![a-z0-9])")


def replacement(name: str, found: str) -> str:
    """The Jinja expression for one spelling of the source name."""
    if found == name:
        return "{{ name }}"
    if found == name.upper():
        return "{{ name|upper }}"
    return "{{ name_camel }}"


def path_template(path: str, name: str) -> str:
    """A file path with the package name replaced (copier renders paths as Jinja too)."""
    return name_pattern(name).sub(lambda m: replacement(name, m.group(0)), path)


def _literal(text: str) -> str:
    """`text` so that Jinja outputs it unchanged."""
    if not text or not _SPECIAL.search(text):
        return text
    pieces = []
    last = 0
    for match in _ENDRAW.finditer(text):
        pieces.append(RAW_OPEN + text[last : match.start()] + RAW_CLOSE)
        pieces.append("{{ " + repr(match.group(0)) + " }}")
        last = match.end()
    pieces.append(RAW_OPEN + text[last:] + RAW_CLOSE)
    return "".join(pieces)


def _line(line: str, pattern: re.Pattern[str], name: str) -> str:
    out, last = [], 0
    for match in pattern.finditer(line):
        out.append(_literal(line[last : match.start()]))
        out.append(replacement(name, match.group(0)))
        last = match.end()
    out.append(_literal(line[last:]))
    return "".join(out)


def to_template(text: str, name: str) -> str:
    """Jinja source for `text`: the name's spellings become expressions, the rest verbatim."""
    pattern = name_pattern(name)
    return "".join(_line(line, pattern, name) for line in text.splitlines(keepends=True))


def mentions(text: str, name: str) -> bool:
    """Whether the text holds one of the name's spellings (then it must become a template)."""
    return name_pattern(name).search(text) is not None
