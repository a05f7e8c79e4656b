"""The kinds of rule a config key can have (litforge.validation.schema's table uses them).

Each says whether a value is valid and, when it is not, what would be, in words that end
up in a one-line error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class Rule:
    """`problem(value)` is None when the value is valid, else what would be valid."""

    null: bool = False

    def problem(self, value: Any) -> str | None:
        valid = self.null if value is None else self.accepts(value)
        return None if valid else f"must be {self.describe()}"

    def describe(self) -> str:
        return f"{self.text()} (or null)" if self.null else self.text()

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def text(self) -> str:
        """What a valid value is, in words."""
        raise NotImplementedError


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class Int(Rule):
    lo: int | None = None
    hi: int | None = None
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return (
            _is_int(value)
            and (self.lo is None or value >= self.lo)
            and (self.hi is None or value <= self.hi)
        )

    def text(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"an integer from {self.lo} to {self.hi}"
        if self.lo is not None:
            return f"an integer >= {self.lo}"
        return f"an integer <= {self.hi}" if self.hi is not None else "an integer"


@dataclass
class Num(Rule):
    """A number in an interval; `open_lo`: strictly above lo."""

    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False
    open_hi: bool = False
    null: bool = False

    def accepts(self, value: Any) -> bool:
        if not _is_number(value) or value != value:  # NaN is no number a key wants
            return False
        above = self.lo is None or (value > self.lo if self.open_lo else value >= self.lo)
        below = self.hi is None or (value < self.hi if self.open_hi else value <= self.hi)
        return above and below

    def text(self) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.open_lo else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.open_hi else '<='} {self.hi:g}")
        return " and ".join(["a number", *parts]).replace("number and", "number")


@dataclass
class Bool(Rule):
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)

    def text(self) -> str:
        return "true or false"


@dataclass
class OneOf(Rule):
    choices: tuple[Any, ...]
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return any(value == c and type(value) is type(c) for c in self.choices)

    def text(self) -> str:
        # "32" and 32 (a precision as Hydra may parse it) read the same: name it once.
        return "one of " + ", ".join(dict.fromkeys(str(c) for c in self.choices))


@dataclass
class Text(Rule):
    """A string, optionally matching `pattern` (described by `meaning`)."""

    pattern: str | None = None
    meaning: str = "a string"
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and (
            self.pattern is None or re.fullmatch(self.pattern, value) is not None
        )

    def text(self) -> str:
        return self.meaning


@dataclass
class Either(Rule):
    """Valid when any of `rules` accepts the value."""

    rules: tuple[Rule, ...]
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return any(rule.accepts(value) for rule in self.rules)

    def text(self) -> str:
        return ", or ".join(rule.describe() for rule in self.rules)


@dataclass
class ListOf(Rule):
    item: Rule
    length: int | None = None
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return (
            isinstance(value, list)
            and len(value) > 0
            and (self.length is None or len(value) == self.length)
            and all(self.item.accepts(v) for v in value)
        )

    def text(self) -> str:
        size = f"{self.length} " if self.length else "1 or more "
        return f"a list of {size}values, each {self.item.describe()}"


class Free(Rule):
    """Anything: values that their own constructor checks (a `_target_` object's kwargs)."""

    null = True

    def accepts(self, value: Any) -> bool:
        return True

    def text(self) -> str:
        return "anything"
