"""Byte counts as people read them."""

from __future__ import annotations


def size(n: int) -> str:
    """Bytes in binary units: 1536 -> '1.5 KiB'."""
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
