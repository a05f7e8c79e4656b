"""Shard files damaged the ways storage and people damage them (seeded: a failure names its
case and replays): every read gives the samples as written, or one ConfigError line
naming the shard's URL. Never a traceback, never other samples, never a hang."""

from __future__ import annotations

import copy
import json
import random
import struct
import time
from collections import Counter
from typing import Any

import pytest
import torch

from litforge.data.shards.blocks import Damaged, decode_block, encode_block
from litforge.data.shards.reader import DamagedShards, ShardedDataset
from tests.fuzz.damage import damaged_copies
from tests.fuzz.shard_data import PER_SHARD, check, write

SEED, CASES = 20261205, 40


def test_damaged_shards_read_right_or_are_one_line_naming_the_shard(tmp_path):
    url = str(tmp_path / "ds")
    original = write(url)
    tally: Counter[str] = Counter()
    for shard in ("shard-00000.lfs", "shard-00002.lfs"):  # a torch.save'd block; the short one
        path = tmp_path / "ds" / shard
        good = path.read_bytes()
        for label, damaged in damaged_copies(good, SEED, CASES // 2):
            if damaged is None:
                path.unlink()
            else:
                path.write_bytes(damaged)
            tally[check(f"{shard} {label}", url, [f"{url}/{shard}"], original)] += 1
            path.write_bytes(good)
    assert tally["refused"] >= CASES // 2, tally  # the damage was real: most cases refused
    # One more kind: a shard swapped for another of the same dataset (same size, same
    # count: only the blocks' digests tell them apart) reads right or is refused.
    swapped = (tmp_path / "ds" / "shard-00000.lfs").read_bytes()
    (tmp_path / "ds" / "shard-00001.lfs").write_bytes(swapped)
    assert check("shard 1 replaced by 0", url, [f"{url}/shard-00001.lfs"], original) == "refused"


def test_damaged_shards_on_the_s3_server(s3, tmp_path):
    """The same on the object store (its range reads past a cut differ from a file's): each
    kind of damage once."""
    import fsspec

    url, shard = "s3://litforge/fuzz/ds", "shard-00000.lfs"
    original = write(url)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    path = f"litforge/fuzz/ds/{shard}"
    good = fs.cat_file(path)
    for label, damaged in damaged_copies(good, SEED + 1, 6):
        if damaged is None:
            fs.rm_file(path)
        else:
            fs.pipe_file(path, damaged)
        check(f"s3 {label}", url, [f"{url}/{shard}"], original)
        fs.pipe_file(path, good)
    # Cut under a reader whose cache holds the shard's header: S3 refuses a range past the
    # object's end ("not satisfiable"), which is this damage, not an outage to retry.
    cached = ShardedDataset(url, retries=3, backoff_s=30, cache_dir=str(tmp_path / "cache"))
    assert cached[0][1] == 0  # shard 0's header and first block, cached
    fs.pipe_file(path, good[:200])
    again = ShardedDataset(url, retries=3, backoff_s=30, cache_dir=str(tmp_path / "cache"))
    started = time.monotonic()
    with pytest.raises(DamagedShards, match=rf"^{url}/{shard}: damaged: it ends before byte "):
        [again[i] for i in range(PER_SHARD)]
    assert time.monotonic() - started < 10  # not retried: a retry waits 30 s


ODD = (0, -1, 3, 10**9, 2**70, 1.5, True, None, "int64", "Tensor", [], {}, [3, "x"])


def forge(meta: Any, rng: random.Random) -> Any:
    """`meta` (a column block's JSON header) with one value somewhere in it replaced or
    removed, as a hostile writer would (its digest then made to match)."""
    meta = copy.deepcopy(meta)
    node, path = meta, []
    while isinstance(node, dict | list) and node and rng.random() < 0.8:
        key = rng.choice(sorted(node) if isinstance(node, dict) else range(len(node)))
        path.append((node, key))
        node = node[key]
    if not path:
        return rng.choice(ODD)
    parent, key = path[-1]
    if isinstance(parent, dict) and rng.random() < 0.3:
        del parent[key]
    else:
        parent[key] = rng.choice(ODD)
    return meta


def test_a_block_from_a_hostile_writer_decodes_to_its_count_or_is_refused():
    """Digests only prove the bytes are the writer's: decoding must hold against a writer
    that lies in a block's JSON (any value anywhere) or its raw bytes, with every
    sample's structure kind: a list of exactly the promised number of samples, or
    `Damaged`. Never another exception, never a hang or a huge allocation."""
    samples = [(torch.full((2, 3), float(i)), torch.tensor(i), i, 0.5 * i, f"s{i}",
                {"m": torch.arange(3, dtype=torch.bfloat16) + i, "b": i % 2 == 0})
               for i in range(6)]  # fmt: skip
    good = encode_block(samples)
    size = struct.unpack_from("<I", good, 4)[0]
    meta = json.loads(good[8 : 8 + size])
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    cases = [(f"forged {i}", forge(meta, rng)) for i in range(1000)]
    for label, forged in cases:
        raw = json.dumps(forged).encode()
        outcomes[
            decoded(label, good[:4] + struct.pack("<I", len(raw)) + raw + good[8 + size :])
        ] += 1
    for label, damaged in damaged_copies(good, SEED, 100):
        outcomes[decoded(label, damaged or b"")] += 1
    pickled = encode_block([torch.zeros(i) for i in range(6)])  # ragged: torch.save'd
    for label, damaged in damaged_copies(pickled, SEED, 40):
        outcomes[decoded(f"pickled {label}", damaged or b"")] += 1
    assert outcomes["refused"] > 1000, outcomes


def decoded(label: str, data: bytes) -> str:
    try:
        got = decode_block(data, 6)
    except Damaged:
        return "refused"
    assert isinstance(got, list) and len(got) == 6, f"{label}: {got!r:.200}"
    return "decoded"
