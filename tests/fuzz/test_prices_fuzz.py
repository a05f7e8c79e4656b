"""`--prices FILE` on damaged copies of the example prices file: prices that pass every rule
of the file (known cards, finite figures >= 0, an MTBF above 0; the original's own when the
bytes are unchanged), or one ConfigError line naming the file. A text file has no checksum,
so a flipped digit that still reads as a price is another valid file, not a detectable
fault."""

from __future__ import annotations

import math
from pathlib import Path

from litforge.errors import ConfigError
from litforge.planning.hardware import CARDS
from litforge.planning.plan import prices
from tests.fuzz.damage import damaged_copies

EXAMPLE = Path(__file__).parents[2] / "conf" / "prices.example.yaml"


def test_a_damaged_prices_file_is_valid_prices_or_one_line(tmp_path):
    original = EXAMPLE.read_bytes()
    expected = prices.load(EXAMPLE)
    known = {c.name for c in CARDS}
    for index, (label, data) in enumerate(damaged_copies(original, seed=3, count=300)):
        path = tmp_path / f"prices-{index}.yaml"
        if data is not None:
            path.write_bytes(data)
        try:
            found = prices.load(path)
        except ConfigError as err:
            assert str(err).startswith(f"--prices {path}: "), (label, str(err))
            assert "\n" not in str(err), (label, str(err))
            continue
        if data == original:
            assert found.cards == expected.cards, label
        assert set(found.cards) <= known, label
        for name, price in found.cards.items():
            for field, value in vars(price).items():
                if value is not None:
                    assert math.isfinite(value) and value >= 0, (label, name, field, value)
            assert price.mtbf_hours is None or price.mtbf_hours > 0, (label, name)
        assert isinstance(found.currency, str) and found.source == str(path), label


def test_a_number_too_large_for_a_float_is_one_line(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text("cards:\n  H100: {on_demand: 1" + "0" * 400 + "}\n")
    try:
        prices.load(path)
    except ConfigError as err:
        assert str(err).startswith(f"--prices {path}: cards.H100.on_demand=1000")
        assert "must be a price >= 0" in str(err)
    else:
        raise AssertionError("a price of 10**400 was taken")
