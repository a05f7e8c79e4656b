"""Parquet and WebDataset read where they lie, as written by their own writers: the right
samples, a row group or a block of samples per range read, the WebDataset index built by
one scan and kept, and each damaged file one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from litforge.data.formats import open_source
from litforge.data.formats.parquet import ParquetDataset
from litforge.data.formats.webdataset import WebDatasetDataset
from litforge.errors import ConfigError
from tests.data.format_data import numbered_parquet, numbered_tars, put, tar_bytes


def reads(data) -> list:
    """Count the range reads `data` makes from now on."""
    made, read = [], data.read

    def counted(file: int, start: int, end: int) -> bytes:
        made.append((file, start, end))
        return read(file, start, end)

    data.read = counted
    return made


def one_line(err: pytest.ExceptionInfo, name: str) -> str:
    message = str(err.value)
    assert "\n" not in message and name in message, message
    return message


def test_parquet_rows_come_as_the_columns_say_a_row_group_per_read(tmp_path):
    url = str(tmp_path / "pq")
    numbered_parquet(url, 50, row_group_size=8)  # two files of 25 rows: 8, 8, 8, 1
    data = open_source(url, columns=["x", "y"])
    assert isinstance(data, ParquetDataset)
    assert (len(data), data.counts, data.index.samples_per_block) == (50, [25, 25], 8)
    made = reads(data)
    for i in range(50):
        x, y = data[i]
        assert torch.equal(x, torch.tensor([i, i], dtype=torch.float32)) and int(y) == i
    assert len(made) == 8  # 4 row groups a file, one range read each
    assert data.locate(30) == (f"{url}/part-1.parquet", 5)
    assert open_source(url, format="parquet", columns={"inp": "x", "id": "name"})[3]["id"] == "s3"
    assert set(open_source(url, format="parquet")[0]) == {"x", "y", "name"}
    assert data.stall_advice().endswith("blocks here are 8 samples (write the files with "
                                        "larger row groups)")  # fmt: skip


def test_parquet_row_groups_of_other_sizes_read_as_blocks_of_the_largest(tmp_path):
    url = str(tmp_path / "pq")
    numbered_parquet(f"{url}/a", 20, row_group_size=8, files=1)
    numbered_parquet(f"{url}/b", 30, row_group_size=5, files=1, offset=20)
    (tmp_path / "pq" / "a" / "part-0.parquet").rename(tmp_path / "pq" / "a.parquet")
    (tmp_path / "pq" / "b" / "part-0.parquet").rename(tmp_path / "pq" / "b.parquet")
    data = open_source(url, columns="y")
    assert data.index.samples_per_block == 8
    assert [int(data[i]) for i in range(50)] == list(range(50))


def test_a_split_kept_as_a_prefix_of_names_as_the_hub_keeps_it(tmp_path):
    numbered_parquet(str(tmp_path / "tmp"), 10, files=1)
    for split in ("train", "validation"):
        name = f"{split}-00000-of-00001.parquet"
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / name).write_bytes((tmp_path / "tmp" / "part-0.parquet").read_bytes())
    data = open_source(str(tmp_path / "data" / "val"), columns="y")
    assert len(data) == 10 and data.locate(0)[0].endswith("data/validation-00000-of-00001.parquet")


def test_webdataset_samples_come_by_key_and_the_index_is_built_once(tmp_path):
    url = str(tmp_path / "wds")
    numbered_tars(url, 250, per_tar=100)
    data = open_source(url, columns=["npy", "cls"])
    assert isinstance(data, WebDatasetDataset)
    assert (len(data), data.counts) == (250, [100, 100, 50])
    made = reads(data)
    for i in range(250):
        x, y = data[i]
        assert torch.equal(x, torch.tensor([i, i], dtype=torch.float32)) and y == i
    assert len(made) == 2 + 2 + 1  # blocks of 64 samples: one range read each
    kept = json.loads((tmp_path / "wds" / "litforge-index.json").read_text())
    assert sorted(kept["tars"]) == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    again = WebDatasetDataset.__new__(WebDatasetDataset)
    scans = []
    again._scan = lambda file, listed: scans.append(listed.name)  # a rebuild would call this
    WebDatasetDataset.__init__(again, url, data.columns)
    assert scans == [] and again.fingerprint == data.fingerprint
    sample = open_source(url)[0]
    assert sample["__key__"] == "k000000" and sample["cls"] == 0


def test_the_webdataset_index_goes_to_the_cache_and_a_new_tar_is_added(tmp_path):
    url, cache = str(tmp_path / "wds"), str(tmp_path / "cache")
    numbered_tars(url, 100)
    first = open_source(url, columns="cls", cache_dir=cache)
    assert not (tmp_path / "wds" / "litforge-index.json").exists()
    assert list(Path(cache).glob("*-webdataset-index.json"))
    put(f"{url}/shard-000001.tar", tar_bytes([("k999", {"cls": b"999"})]))
    grown = open_source(url, columns="cls", cache_dir=cache)
    assert grown.counts == [100, 1] and grown.fingerprint != first.fingerprint
    assert grown[100] == 999


def test_a_damaged_parquet_file_is_one_line_naming_it(tmp_path):
    url = str(tmp_path / "pq")
    numbered_parquet(url, 40, files=2)
    path = tmp_path / "pq" / "part-1.parquet"
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(ConfigError) as err:
        open_source(url, columns=["x", "y"])
    assert one_line(err, f"{url}/part-1.parquet").endswith("(truncated?); write the file again "
                                                          "(pyarrow.parquet.write_table), or move "
                                                          "it out of the directory")  # fmt: skip
    path.write_bytes(good)
    with pytest.raises(ConfigError, match=r"part-0.parquet: has no column 'label' \(its columns: "
                       r"x, y, name\); set data.columns") as err:  # fmt: skip
        open_source(url, columns=["x", "label"])
    one_line(err, f"{url}/part-0.parquet")


def test_a_damaged_tar_is_one_line_naming_it(tmp_path):
    url = str(tmp_path / "wds")
    numbered_tars(url, 200)
    path = tmp_path / "wds" / "shard-000001.tar"
    good = path.read_bytes()
    path.write_bytes(good[:5000])  # truncated before it was indexed
    with pytest.raises(ConfigError, match=r"shard-000001.tar: damaged: it ends inside") as err:
        open_source(url, columns=["npy", "cls"])
    one_line(err, f"{url}/shard-000001.tar")
    path.write_bytes(good)
    open_source(url, columns=["npy", "cls"])  # indexed and kept
    path.write_bytes(good[:5000])  # truncated after
    with pytest.raises(ConfigError, match=r"damaged: 5000 bytes, .*litforge-index.json says"):
        open_source(url, columns=["npy", "cls"])
    path.write_bytes(good)
    # A member without its pair: sample k000150 lost its .cls
    unpaired = [(f"k{i:06d}", {"npy": b"x", "cls": b"1"}) for i in range(3)]
    del unpaired[1][1]["cls"]
    put(f"{url}/shard-000002.tar", tar_bytes(unpaired))
    with pytest.raises(ConfigError, match=r"shard-000002.tar: damaged: 1 sample\(s\) have no "
                       r"\.cls member, the first 'k000001' \(it has: npy\)") as err:  # fmt: skip
        open_source(url, columns=["npy", "cls"])
    one_line(err, f"{url}/shard-000002.tar")


def test_a_tar_changed_after_it_was_indexed_is_refused_not_read_as_other_samples(tmp_path):
    url = str(tmp_path / "wds")
    numbered_tars(url, 100)
    data = open_source(url, columns=["npy", "cls"])
    path = tmp_path / "wds" / "shard-000000.tar"
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"\x93NUMPY") + 130] ^= 1  # a byte of a tensor's values
    path.write_bytes(bytes(raw))
    with pytest.raises(ConfigError, match=r"shard-000000.tar: damaged: its bytes differ from "
                       r"those .* indexed"):  # fmt: skip
        open_source(url, columns=["npy", "cls"])
    with pytest.raises(ConfigError, match=r"shard-000000.tar: damaged: block 0 .* does not match"):
        data[0]  # a reader opened before: the block's digest


def test_bad_format_and_columns_are_one_line_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^data.format='csv' is not a format: give one of "
                       r"shards, parquet, webdataset"):  # fmt: skip
        open_source(str(tmp_path), format="csv")
    with pytest.raises(ConfigError, match=r"^data.columns=\[\] must be a column name"):
        open_source(str(tmp_path), format="parquet", columns=[])
    with pytest.raises(ConfigError, match=r"^data.url=.*/none: no \*.parquet files there"):
        open_source(str(tmp_path / "none"), format="parquet")


def _forge(path: Path, tar: Path, edit) -> None:
    """Rewrite the kept index's entry of `tar` with `edit(entry, tar bytes)`, the digests
    of its blocks made right again: a well-formed index that is not the scan's."""
    from litforge.data.formats.tar import block_digest

    record = json.loads(path.read_text())
    entry, raw = record["tars"][tar.name], tar.read_bytes()
    edit(entry, raw)
    entry["blocks"] = [[a, b, block_digest(raw[a:b])] for a, b, _ in entry["blocks"]]
    path.write_text(json.dumps(record))


def test_a_kept_index_that_leaves_samples_out_is_rebuilt_or_refused(tmp_path):
    url = str(tmp_path / "wds")
    numbered_tars(url, 150, per_tar=150)  # blocks of 64, 64, 22
    kept, tar = tmp_path / "wds" / "litforge-index.json", tmp_path / "wds" / "shard-000000.tar"
    open_source(url, columns=["npy", "cls"])
    starts = [b[0] for b in json.loads(kept.read_text())["tars"][tar.name]["blocks"]]
    assert starts[0] == 0

    def skip_first_sample(entry, raw):  # the first block starts at the second sample
        entry["blocks"][0][0] = raw.index(b"k000001.npy")

    _forge(kept, tar, skip_first_sample)
    data = open_source(url, columns=["npy", "cls"])  # not trusted: scanned again
    assert [int(data[i][1]) for i in range(len(data))] == list(range(150))

    def cut_the_last_sample(entry, raw):  # as if the tar held 149 samples
        last = entry["blocks"][-1]
        last[1] = raw.rindex(b"k000149.npy")
        entry["samples"] -= 1

    _forge(kept, tar, cut_the_last_sample)
    data = open_source(url, columns=["npy", "cls"])
    with pytest.raises(ConfigError, match=r"shard-000000\.tar: damaged: no end of the archive at "
                       r"byte \d+, where .*litforge-index\.json says its last sample ends"):  # fmt: skip
        data[148]


def test_a_tar_with_a_directory_before_its_samples_reads_from_byte_0(tmp_path):
    import io
    import tarfile

    sink = io.BytesIO()
    with tarfile.open(fileobj=sink, mode="w") as archive:
        folder = tarfile.TarInfo("train")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        for i in range(3):
            info = tarfile.TarInfo(f"train/k{i}.cls")
            info.size = 1
            archive.addfile(info, io.BytesIO(str(i).encode()))
    put(str(tmp_path / "wds" / "a.tar"), sink.getvalue())
    data = open_source(str(tmp_path / "wds"), columns=["cls"])
    assert [int(data[i][0]) for i in range(3)] == [0, 1, 2] and data.tars[0]["blocks"][0][0] == 0


def test_webdataset_blocks_are_read_ahead_as_a_range_per_tar_in_the_orders_epoch(tmp_path):
    from litforge.data.shards.order import BlockOrderSampler

    url = str(tmp_path / "wds")
    numbered_tars(url, 640, per_tar=320)  # 2 tars of 5 blocks
    data, alone = (
        open_source(url, columns=["npy", "cls"]),
        open_source(url, columns=["npy", "cls"], readahead_bytes=0),
    )
    made, made_alone = reads(data), reads(alone)
    indices = list(BlockOrderSampler(data.counts, data.index.samples_per_block, seed=3, window=2))
    got = [(data[i][0].tolist(), int(data[i][1])) for i in indices]
    assert got == [(alone[int(i)][0].tolist(), int(alone[int(i)][1])) for i in indices]
    assert sorted(y for _, y in got) == list(range(640))
    assert len(made_alone) == 10 and len(made) <= 2  # a block a read, against a tar a read
