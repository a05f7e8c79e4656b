"""Seeded damage for the fuzz tests: every reader of bytes litforge did not just write gets
real files broken the ways storage and people break them, and must answer each with the
right data or one line naming the file.

`damaged_copies(data, seed, count)` yields `(label, damaged_bytes_or_None)`; None means the
file is gone. The label says which damage it was, so a failing case names itself.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

Damage = tuple[str, bytes | None]


def truncate(data: bytes, rng: random.Random) -> Damage:
    """Cut the file at a random offset (a partial upload, a full disk)."""
    at = rng.randrange(0, max(1, len(data)))
    return f"truncated at {at} of {len(data)}", data[:at]


def flip(data: bytes, rng: random.Random) -> Damage:
    """Flip 1 to 8 random bytes (bit rot, a hostile edit)."""
    if not data:
        return "flipped nothing (empty)", data
    damaged = bytearray(data)
    spots = sorted(rng.sample(range(len(data)), min(len(data), rng.randint(1, 8))))
    for spot in spots:
        damaged[spot] ^= rng.randint(1, 255)
    return f"flipped bytes at {spots}", bytes(damaged)


def zero_header(data: bytes, rng: random.Random) -> Damage:
    """Zero a run of bytes near the start, where formats keep their header."""
    start = rng.randrange(0, max(1, min(len(data), 64)))
    length = rng.randint(1, 64)
    damaged = bytearray(data)
    damaged[start : start + length] = bytes(len(damaged[start : start + length]))
    return f"zeroed {length} bytes at {start}", bytes(damaged)


def empty(data: bytes, rng: random.Random) -> Damage:
    return "emptied", b""


def drop(data: bytes, rng: random.Random) -> Damage:
    """The file is gone (deleted by another job, a lifecycle rule)."""
    return "deleted", None


KINDS = (truncate, flip, zero_header, empty, drop)


def damaged_copies(data: bytes, seed: int, count: int) -> Iterator[Damage]:
    """`count` damaged versions of `data`, the same ones for the same seed: every kind once,
    then random kinds."""
    rng = random.Random(seed)
    for index in range(count):
        kind = KINDS[index] if index < len(KINDS) else rng.choice(KINDS)
        yield kind(data, rng)
