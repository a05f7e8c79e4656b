"""index.json damaged (seeded): as bytes (cut, flipped, zeroed, emptied, deleted), and
as JSON that still parses but lies (a field gone, a wrong type, a count off, a name
elsewhere). Every read gives the samples as written, or one ConfigError line naming the
index's URL. Never a traceback, never other samples, never a hang."""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from typing import Any

from tests.fuzz.damage import damaged_copies
from tests.fuzz.shard_data import check, write

SEED, CASES = 20261205, 40
ODD_VALUES = (0, -1, 7, 10**9, 2**70, 1.5, True, None, "24", [], {})


def lie(record: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]]:
    """The index with one field changed the way a hand edit or a bad writer would."""
    record = copy.deepcopy(record)
    shard = rng.choice(record["shards"])
    kind = rng.choice(("drop key", "odd value", "shard key", "shard value", "count", "name"))
    if kind == "drop key":
        key = rng.choice(sorted(record))
        del record[key]
        return f"without {key}", record
    if kind == "odd value":
        key, value = rng.choice(sorted(record)), rng.choice(ODD_VALUES)
        record[key] = value
        return f"{key}={value!r}", record
    if kind == "shard key":
        key = rng.choice(sorted(shard))
        del shard[key]
        return f"{shard['name'] if key != 'name' else 'a shard'} without {key}", record
    if kind == "shard value":
        key, value = rng.choice(sorted(shard)), rng.choice(ODD_VALUES)
        shard[key] = value
        return f"a shard's {key}={value!r}", record
    if kind == "count":  # one shard's samples or bytes off, the total kept consistent
        key, delta = rng.choice(("samples", "bytes")), rng.choice((-8, -1, 1, 8, 100))
        shard[key] = max(1, shard[key] + delta)
        record["samples"] = sum(s["samples"] for s in record["shards"])
        return f"{shard['name']} {key} {delta:+d}", record
    other = rng.choice(("shard-00009.lfs", "../index.json", "/etc/passwd", "", "shard-00001.lfs"))
    name, shard["name"] = shard["name"], other
    return f"{name} named {other!r}", record


def test_a_damaged_index_reads_right_or_is_one_line_naming_it(tmp_path):
    url = str(tmp_path / "ds")
    original = write(url)
    path = tmp_path / "ds" / "index.json"
    good = path.read_bytes()
    names = [f"{url}/index.json"]
    tally: Counter[str] = Counter()
    for label, damaged in damaged_copies(good, SEED, CASES):
        if damaged is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(damaged)
        tally[check(f"index.json {label}", url, names, original)] += 1
    rng = random.Random(SEED)
    for _ in range(CASES):
        label, record = lie(json.loads(good), rng)
        path.write_text(json.dumps(record, indent=1))
        tally[check(f"index.json {label}", url, names, original)] += 1
    path.write_bytes(good)
    assert tally["refused"] >= CASES, tally  # the damage was real: most cases refused
    assert check("index.json as written", url, names, original) == "read"
