"""A prices file: what each card costs per card-hour, on demand and on spot, and how often
spot takes it away.

    date: 2026-12-01          # when the figures were read
    currency: USD
    cards:
      H100: {on_demand: 2.99, spot: 1.49, mtbf_hours: 8}
      L4:   {on_demand: 0.80}

Card names are those of `litforge.planning.hardware.CARDS`; a price or MTBF left out is not
planned with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from litforge.errors import ConfigError
from litforge.planning.hardware import CARDS

FIELDS = ("on_demand", "spot", "mtbf_hours")


@dataclass(frozen=True)
class Price:
    """Per card-hour; `mtbf_hours`: mean time between preemptions on spot."""

    on_demand: float | None = None
    spot: float | None = None
    mtbf_hours: float | None = None


@dataclass(frozen=True)
class Prices:
    cards: dict[str, Price]
    currency: str = "USD"
    date: str | None = None
    source: str | None = None  # the file they came from


def load(path: str | Path) -> Prices:
    """The prices in `path`; one ConfigError naming the file and key for anything wrong."""
    # ValueError: not UTF-8, or an integer past Python's 4300 digits.
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as err:
        raise ConfigError(f"--prices {path}: cannot be read as YAML ({_one_line(err)})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cards"), dict):
        raise ConfigError(f"--prices {path}: needs a `cards:` mapping of card name -> prices")
    known = {c.name: c for c in CARDS}
    cards = {}
    for name, entry in data["cards"].items():
        if name not in known:
            raise ConfigError(
                f"--prices {path}: cards.{name} is not a card of litforge.planning.hardware "
                f"(one of: {', '.join(known)})"
            )
        if not isinstance(entry, dict) or set(entry) - set(FIELDS):
            raise ConfigError(
                f"--prices {path}: cards.{name} must be a mapping of {', '.join(FIELDS)}"
            )
        cards[name] = Price(**{k: _number(path, f"cards.{name}.{k}", v) for k, v in entry.items()})
    return Prices(cards, str(data.get("currency", "USD")), _text(data.get("date")), str(path))


def _one_line(err: Exception) -> str:
    """A YAML error's problem and where (its text spans lines), or any error's own line."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or getattr(err, "strerror", None) or str(err)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return " ".join(f"{problem}{where}".split())


def _number(path: Any, key: str, value: Any) -> float:
    # A YAML integer can be too large for a float (math.isfinite would raise).
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = number and abs(value) < 1e300 and math.isfinite(value)
    if not ok or value < 0 or (key.endswith("mtbf_hours") and value == 0):
        wanted = "a number of hours above 0" if key.endswith("mtbf_hours") else "a price >= 0"
        raise ConfigError(f"--prices {path}: {key}={value!r} must be {wanted}")
    return float(value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
