"""data.cache_dir is a cache, not a requirement: a directory that cannot be written, a disk
that fills up, a cached block damaged or left by another dataset. Reading goes on with the
right samples; a problem with the directory is one warning naming it."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import torch

from litforge.data.shards.cache import BlockCache
from litforge.data.shards.reader import ShardedDataset
from litforge.data.shards.writer import write_shards


def write(url: Path, offset: int = 0) -> None:
    write_shards([(torch.full((4,), float(i + offset)), i) for i in range(40)], str(url),
                 samples_per_shard=20, samples_per_block=5, overwrite=True)  # fmt: skip


def read_all(data: ShardedDataset) -> list[float]:
    return [float(data[i][0][0]) for i in range(len(data))]


def cache_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "data.cache_dir=" in r.getMessage()]


def test_a_cache_dir_that_cannot_be_made_or_written_is_one_warning_then_no_cache(tmp_path, caplog):
    write(tmp_path / "ds")
    (tmp_path / "a-file").write_text("")
    # Both refuse root too: a directory under a regular file, and /proc's own entries.
    for cache_dir in (tmp_path / "a-file" / "cache", Path("/proc/self")):
        caplog.clear()
        with caplog.at_level(logging.WARNING, "litforge"):
            datasets = [
                ShardedDataset(str(tmp_path / "ds"), cache_dir=str(cache_dir)) for _ in range(3)
            ]  # the splits of one run share a cache_dir
            assert read_all(datasets[0]) == [float(i) for i in range(40)]
        said = cache_warnings(caplog)
        assert len(said) == 1, said
        assert said[0].startswith(f"data.cache_dir={cache_dir} cannot be written (")
        assert said[0].endswith("): reading without a cache")


def test_a_full_disk_is_one_warning_leaves_no_partial_file_and_reading_goes_on(
    tmp_path, caplog, monkeypatch
):
    """The disk fills while a block is written: the fault is injected into os.write for
    files in the cache directory after 100 bytes (as tests/checkpointing/test_full_disk.py
    does for checkpoint files)."""
    write(tmp_path / "ds")
    cache = tmp_path / "cache"
    real_write = os.write

    def filling_write(fd: int, data) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(cache)):
            if len(data) > 100:
                return real_write(fd, bytes(data[:100]))  # a short write, then none
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    data = ShardedDataset(str(tmp_path / "ds"), cache_dir=str(cache))
    monkeypatch.setattr(os, "write", filling_write)
    with caplog.at_level(logging.WARNING, "litforge"):
        assert read_all(data) == [float(i) for i in range(40)]
    assert cache_warnings(caplog) == [
        f"data.cache_dir={cache} cannot be written (No space left on device): reading "
        "without a cache"
    ]
    assert list(cache.iterdir()) == []  # no .partial, no half block


def test_a_damaged_cached_block_is_dropped_and_read_again(tmp_path):
    write(tmp_path / "ds")
    cache = tmp_path / "cache"
    assert read_all(ShardedDataset(str(tmp_path / "ds"), cache_dir=str(cache))) == list(
        map(float, range(40))
    )
    blocks = sorted(cache.glob("*.lfs-[0-9].blk"))
    headers = sorted(cache.glob("*-header.blk"))
    assert len(blocks) == 8 and len(headers) == 2
    blocks[0].write_bytes(blocks[0].read_bytes()[:-3])  # cut short
    flipped = bytearray(blocks[1].read_bytes())
    flipped[-1] ^= 0x40  # a tensor byte: without the digest, a wrong sample
    blocks[1].write_bytes(bytes(flipped))
    blocks[2].write_bytes(blocks[3].read_bytes())  # another block's bytes under its name
    headers[0].write_bytes(headers[0].read_bytes()[:-1])  # a header cut short
    zeroed = bytearray(headers[1].read_bytes())
    zeroed[-16:] = bytes(16)  # the last block's digest gone
    headers[1].write_bytes(bytes(zeroed))
    again = ShardedDataset(str(tmp_path / "ds"), cache_dir=str(cache))
    assert read_all(again) == [float(i) for i in range(40)]
    assert blocks[1].read_bytes() != bytes(flipped)  # replaced by the block as fetched
    assert headers[1].read_bytes() != bytes(zeroed)  # read again from the shard


def test_a_dataset_rewritten_at_the_same_url_never_gets_the_old_cached_blocks(tmp_path):
    url, cache = tmp_path / "ds", tmp_path / "cache"
    write(url)
    assert read_all(ShardedDataset(str(url), cache_dir=str(cache)))[:2] == [0.0, 1.0]
    old = {p.name for p in cache.glob("*.blk")}
    write(url, offset=1000)  # the same sizes and counts, other samples
    assert read_all(ShardedDataset(str(url), cache_dir=str(cache)))[:2] == [1000.0, 1001.0]
    new = {p.name for p in cache.glob("*.blk")} - old
    assert len(new) == len(old) == 10  # keyed on the new index (the old ones age out)


def test_a_partial_block_of_a_live_writer_is_kept_and_of_a_killed_one_removed(tmp_path):
    """Loader workers share the directory: one starting must not delete the block another
    is writing (its rename would fail), only what a killed process left."""
    cache = tmp_path / "cache"
    cache.mkdir()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    (cache / f"{os.getpid()}-abc.partial").write_bytes(b"half")  # this process, writing
    (cache / f"{int(ended.stdout)}-abc.partial").write_bytes(b"half")  # killed mid-block
    BlockCache(cache, 1000)
    assert [p.name for p in cache.glob("*.partial")] == [f"{os.getpid()}-abc.partial"]
