"""Shard files damaged the ways storage and people damage them (seeded: a failure names its
case and replays): every read gives the samples as written, or one ConfigError line
naming the shard's URL. Never a traceback, never other samples, never a hang."""

from __future__ import annotations

from collections import Counter

from tests.fuzz.damage import damaged_copies
from tests.fuzz.shard_data import check, write

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


def test_damaged_shards_on_the_s3_server(s3):
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
