"""Each way a shard or its index is damaged is one line that names the file's URL and says
what is wrong, raised at the first read of that file (the index: before training), not
retried as an outage; also from a loader worker, and through train.py."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from litforge.data.shards import format as fmt
from litforge.data.shards.blocks import Damaged, decode_block
from litforge.data.shards.reader import DamagedShards, ShardedDataset
from litforge.data.shards.writer import write_shards
from tests.helpers import run_entry

SHARD = "shard-00000.lfs"


def write(url: Path) -> None:
    write_shards([(torch.full((2,), float(i)), i) for i in range(32)], str(url),
                 samples_per_shard=24, samples_per_block=8)  # fmt: skip


def patch(path: Path, at: int, value: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[at : at + len(value)] = value
    path.write_bytes(bytes(data))


def index_edit(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(ds: Path) -> None:
        record = json.loads((ds / fmt.INDEX).read_text())
        change(record)
        (ds / fmt.INDEX).write_text(json.dumps(record))

    return edit


def under_count(record: dict) -> None:
    record["shards"][0]["samples"] = 16  # of 24: 8 samples never read
    record["samples"] -= 8


def hostile_block(ds: Path) -> None:
    """A consistent shard (digests right) whose first block holds 7 samples, not 8."""
    blocks = [fmt.encode_block([(torch.zeros(2), i) for i in range(n)]) for n in (7, 8, 8)]
    (ds / SHARD).write_bytes(fmt.encode_shard(blocks, 24))
    data = (ds / SHARD).read_bytes()
    index_edit(lambda r: r["shards"][0].update(bytes=len(data), header=fmt.header_digest(data)))(ds)


OFFSETS = fmt.HEAD_SIZE  # where the block offsets start (u64 each)
CASES = {  # damage -> what the line says (after "URL: damaged: ")
    "truncated": (lambda ds: (ds / SHARD).write_bytes((ds / SHARD).read_bytes()[:300]),
                  SHARD, "300 bytes, {index} says"),
    "empty": (lambda ds: (ds / SHARD).write_bytes(b""), SHARD, "empty, {index} says"),
    "deleted": (lambda ds: (ds / SHARD).unlink(), SHARD, "listed in {index} but not there"),
    "garbled magic": (lambda ds: patch(ds / SHARD, 0, b"PK\x03\x04"), SHARD,
                      "not a litforge shard (its first bytes are b'PK\\x03\\x04'"),
    "other version": (lambda ds: patch(ds / SHARD, 4, struct.pack("<I", 7)), SHARD,
                      "a shard of format version 7, this litforge reads 2"),
    "10^9 blocks": (lambda ds: patch(ds / SHARD, 16, struct.pack("<I", 10**9)), SHARD,
                    "its header counts 1000000000 blocks; 24 samples of 8 per block"),
    "offsets out of order": (lambda ds: patch(ds / SHARD, OFFSETS + 8, struct.pack("<Q", 1)),
                             SHARD, "its block offsets are out of order"),
    "offsets past the end": (lambda ds: patch(ds / SHARD, OFFSETS + 24, struct.pack("<Q", 10**6)),
                             SHARD, "its blocks end at byte 1000000 of a"),
    "a tensor byte flipped": (lambda ds: patch(ds / SHARD, (ds / SHARD).stat().st_size - 1, b"\x7f"),
                              SHARD, "block 2 (bytes"),
    "under-counted": (index_edit(under_count), SHARD, "its header counts 24 samples, {index} says 16"),
    "another header": (index_edit(lambda r: r["shards"][0].update(header="0" * 64)), SHARD,
                       "its header does not match its digest in {index} (replaced or damaged?)"),
    "samples_per_block 0": (index_edit(lambda r: r.update(samples_per_block=0)), fmt.INDEX,
                            "samples_per_block=0, not a positive count"),
    "no shards": (index_edit(lambda r: r.pop("shards")), fmt.INDEX, "no list of shards"),
    "a block of 7": (hostile_block, SHARD, "block 0: a block of 7 samples where 8 belong"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_each_damage_is_one_line_naming_the_file_and_what_is_wrong(tmp_path, case):
    damage, name, said = CASES[case]
    ds = tmp_path / "ds"
    write(ds)
    damage(ds)
    with pytest.raises(DamagedShards) as raised:
        data = ShardedDataset(str(ds), retries=3, backoff_s=30)  # an outage would wait 30 s
        [data[i] for i in range(len(data))]
    message = str(raised.value)
    assert "\n" not in message
    start = f"{ds}/{name}: damaged: " + said.format(index=f"{ds}/{fmt.INDEX}")
    assert message.startswith(start), message
    assert message.endswith("; rewrite the dataset with `litforge shards write`")


def test_a_hostile_column_block_allocates_nothing_and_reads_nothing_outside():
    good = fmt.encode_block([(torch.zeros(2), i) for i in range(4)])
    size = struct.unpack_from("<I", good, 4)[0]
    meta = json.loads(good[8 : 8 + size])

    def block(**column: object) -> bytes:
        forged = json.loads(json.dumps(meta))
        forged["columns"][0].update(column)
        raw = json.dumps(forged).encode()
        return good[:4] + struct.pack("<I", len(raw)) + raw + good[8 + size :]

    hostile = {
        "dtype 'Tensor'": (block(dtype="Tensor"), "not a tensor dtype"),  # getattr(torch, ...)
        "10^9 elements": (block(shape=[4, 10**9], bytes=4 * 10**9 * 4), "reaches byte"),
        "bytes too few": (block(shape=[4, 10**9]), "claims"),
        "outside": (block(at=10**6), "reaches byte"),
        "negative": (block(at=-8), "not a byte offset"),
        "other rows": (block(shape=[5, 2]), "holds 5 samples, the block 4"),
    }
    for data, said in hostile.values():
        with pytest.raises(Damaged, match=said):
            decode_block(data, 4)
    assert [y for _, y in decode_block(good, 4)] == [0, 1, 2, 3]


def test_a_damaged_shard_read_in_a_loader_worker_is_the_same_one_line(tmp_path):
    write(tmp_path / "ds")
    patch(tmp_path / "ds" / SHARD, 0, b"PK\x03\x04")
    loader = DataLoader(ShardedDataset(str(tmp_path / "ds")), batch_size=8, num_workers=1)
    with pytest.raises(DamagedShards) as raised:
        list(loader)
    assert str(raised.value).startswith(f"{tmp_path / 'ds'}/{SHARD}: damaged: not a litforge")
    assert "\n" not in str(raised.value) and "Traceback" not in str(raised.value)


@pytest.mark.slow  # ~17 s; make test: test_a_damaged_shard_read_in_a_loader_worker_is_the_same_one_line
def test_train_py_stops_on_a_damaged_shard_in_one_line(tmp_path):
    """Read by a loader worker mid-run: the console shows one line, exit status 2."""
    from litforge_examples.data.digits import DigitsDataModule

    digits = DigitsDataModule(batch_size=64)
    digits.setup("fit")
    for split in ("train", "val", "test"):
        write_shards(getattr(digits, f"{split}_set"), str(tmp_path / "d" / split))
    shard = tmp_path / "d" / "train" / SHARD
    patch(shard, 0, b"PK\x03\x04")
    done = run_entry("train.py", "data=digits_stream", f"data.url={tmp_path / 'd'}",
                     "data.num_workers=1", "trainer.max_steps=3", "test=false",
                     run_dir=tmp_path / "run")  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and lines[0].startswith(
        f"error: {shard}: damaged: not a litforge shard"
    ), lines
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
