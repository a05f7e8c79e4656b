"""Parquet files and WebDataset tars damaged the ways storage and people damage them
(seeded, `damage.KINDS`): every read gives the samples as written, or one ConfigError line
naming the file. Never a traceback, never other samples, never a hang."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import torch

from litforge.data.formats import open_source
from litforge.errors import ConfigError
from tests.data.format_data import numbered_parquet, numbered_tars
from tests.fuzz import shard_data
from tests.fuzz.damage import damaged_copies

SEED, CASES = 20261206, 40
SAMPLES = 60


def read_source(url: str, **options: Any) -> list[Any]:
    """Every sample of the Parquet files or tars at `url`, through a fresh reader."""
    data = open_source(url, retries=0, **options)
    return [data[i] for i in range(len(data))]


def outcome(url: str, **options: Any) -> tuple[str, Any]:
    """('samples', [...]) or ('error', exception), read in a thread (a hang fails)."""
    return shard_data.outcome(url, read=read_source, **options)


def check(label: str, url: str, name: str, held: range, **options: Any) -> str:
    """The samples x = [i, i], y = i for i < SAMPLES, or one line naming `name`. A file
    deleted where nothing recorded it (no index of litforge's) leaves a dataset of the
    other files: their samples exactly (a resume notices it by the fingerprint)."""
    kind, got = outcome(url, **options)
    if kind == "samples":
        ids = [i for i in range(SAMPLES) if label != "deleted" or i not in held]
        assert len(got) == len(ids), f"{label}: {len(got)} samples"
        for i, (x, y) in zip(ids, got, strict=True):
            assert torch.equal(x, torch.full((2,), float(i))) and int(y) == i, f"{label}: {i}"
        return "read"
    assert isinstance(got, ConfigError), f"{label}: {type(got).__name__}: {got}"
    assert "\n" not in str(got), f"{label}: more than one line: {got}"
    assert f"{url}/{name}" in str(got), f"{label}: names no file: {got}"
    return "refused"


def damage_each(path: Path, seed: int, run) -> Counter[str]:
    good, tally = path.read_bytes(), Counter()
    for label, damaged in damaged_copies(good, seed, CASES):
        if damaged is None:
            path.unlink()
        else:
            path.write_bytes(damaged)
        tally[run(label)] += 1
        path.write_bytes(good)
    return tally


def test_damaged_parquet_files_read_right_or_are_one_line_naming_the_file(tmp_path):
    """Written with page checksums (pyarrow's write_page_checksum): a flipped byte inside a
    page's values is found by them (docs/data.md: without them it can read as another value)."""
    url = str(tmp_path / "pq")
    numbered_parquet(url, SAMPLES, row_group_size=8, write_page_checksum=True)
    name = "part-1.parquet"
    tally = damage_each(tmp_path / "pq" / name, SEED,
                        lambda label: check(label, url, name, range(30, 60), columns=["x", "y"]))  # fmt: skip
    assert tally["refused"] >= CASES // 2, tally


def test_damaged_tars_read_right_or_are_one_line_naming_the_file(tmp_path):
    """Damaged before the index was built (the scan meets it), and after (the kept index's
    sizes and digests meet it)."""
    url = str(tmp_path / "wds")
    numbered_tars(url, SAMPLES, per_tar=25)  # 25, 25, 10
    name = "shard-000001.tar"
    kept = tmp_path / "wds" / "litforge-index.json"

    def before(label: str) -> str:
        kept.unlink(missing_ok=True)
        return check(label, url, name, range(25, 50), columns=["npy", "cls"])

    tally = damage_each(tmp_path / "wds" / name, SEED, before)
    kept.unlink(missing_ok=True)
    open_source(url, columns=["npy", "cls"])  # builds and keeps the index of the good tars

    def after(label: str) -> str:
        return check(f"after the index: {label}", url, name, range(0), columns=["npy", "cls"])

    tally_after = damage_each(tmp_path / "wds" / name, SEED + 1, after)
    # Read right after damage: bytes past the end-of-archive blocks (tarfile pads the
    # archive to 10 KiB), which hold no sample.
    assert tally_after["refused"] >= CASES // 2, tally_after
    assert tally["refused"] >= CASES // 4, tally


def test_a_damaged_kept_webdataset_index_reads_right_or_is_one_line_naming_a_file(tmp_path):
    """The index kept beside the tars is data too: damaged, it is rebuilt (the tars are the
    data) or, where it still parses as an index, each read it misleads is one line."""
    url = str(tmp_path / "wds")
    numbered_tars(url, SAMPLES, per_tar=25)
    open_source(url, columns=["npy", "cls"])
    kept = tmp_path / "wds" / "litforge-index.json"
    good = kept.read_bytes()
    tally: Counter[str] = Counter()
    for label, damaged in damaged_copies(good, SEED + 2, CASES):
        if damaged is None:
            kept.unlink()
        else:
            kept.write_bytes(damaged)
        kind, got = outcome(url, columns=["npy", "cls"])
        if kind == "samples":
            assert [(x.tolist(), int(y)) for x, y in got] == [
                ([float(i)] * 2, i) for i in range(SAMPLES)
            ], label
            tally["read"] += 1
        else:
            assert isinstance(got, ConfigError), f"{label}: {type(got).__name__}: {got}"
            assert "\n" not in str(got) and f"{url}/" in str(got), f"{label}: {got}"
            tally["refused"] += 1
        kept.write_bytes(good)
    assert tally["read"] >= CASES // 2, tally
