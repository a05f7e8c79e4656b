"""Sharded datasets: written to a store, read back block by block, in a two-level order
that resumes exactly at any position and on any number of processes."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from litforge.data.shards.cache import BlockCache
from litforge.data.shards.format import INDEX
from litforge.data.shards.order import BlockOrder, BlockOrderSampler
from litforge.data.shards.reader import DataStoreUnreachable, ShardedDataset
from litforge.data.shards.writer import write_shards
from litforge.errors import ConfigError
from litforge_examples.data.digits import DigitsDataModule


def pairs(n: int) -> list[tuple[torch.Tensor, int]]:
    """Sample i: ([2i, 2i + 1], i), the pair a view into one 1 MiB tensor."""
    base = torch.zeros(n, 256)
    base[:, :2] = torch.arange(2 * n, dtype=torch.float32).view(n, 2)
    return [(base[i, :2], i) for i in range(n)]


def test_a_map_style_dataset_round_trips_in_blocks(tmp_path):
    index = write_shards(
        pairs(1000), str(tmp_path / "ds"), samples_per_shard=300, samples_per_block=32
    )
    assert [s.samples for s in index.shards] == [300, 300, 300, 100]
    data = ShardedDataset(str(tmp_path / "ds"))
    assert len(data) == 1000
    for i in (0, 31, 32, 299, 300, 999):
        x, label = data[i]
        assert label == i and x.tolist() == [2.0 * i, 2.0 * i + 1]
    # Each view was copied out: a shard holds its samples, not the 1 MiB base per block.
    assert index.shards[0].bytes < 1 << 20


def test_an_iterator_and_the_digits_examples_write_too(tmp_path):
    write_shards((torch.full((3,), float(i)) for i in range(10)), str(tmp_path / "it"))
    assert ShardedDataset(str(tmp_path / "it"))[7].tolist() == [7.0, 7.0, 7.0]
    digits = DigitsDataModule(batch_size=8)
    digits.setup("fit")
    write_shards(digits.train_set, str(tmp_path / "digits"), provides="labelled images")
    streamed = ShardedDataset(str(tmp_path / "digits"))
    assert len(streamed) == len(digits.train_set) and streamed.index.provides == "labelled images"
    for i in (0, 500, len(streamed) - 1):
        assert torch.equal(streamed[i][0], digits.train_set[i][0])
        assert int(streamed[i][1]) == int(digits.train_set[i][1])


def test_shards_on_the_s3_server(s3):
    url = "s3://litforge/shards/pairs"
    write_shards(pairs(200), url, samples_per_shard=64, samples_per_block=16)
    data = ShardedDataset(url)
    assert [data[i][1] for i in (0, 63, 64, 199)] == [0, 63, 64, 199]


def test_the_order_is_a_permutation_of_shard_groups_blocks_and_windows_and_seeks(tmp_path):
    counts = [48, 48, 24]  # whole blocks of 8
    order = BlockOrder(counts, 8, seed=3, epoch=1, shuffle=True, window=2, group=2)
    whole = list(order.from_position(0))
    assert sorted(whole) == list(range(120)) and whole != list(range(120))
    for k in (0, 1, 7, 8, 15, 16, 47, 48, 63, 95, 96, 119):  # any position: the same tail
        assert list(order.from_position(k)) == whole[k:]
    first, second = order.groups  # two shards' blocks shuffled together, then the third
    assert len(first) == 2 and len(second) == 1
    split = sum(counts[s] for s in first)
    in_first = {i for s in first for i in range(sum(counts[:s]), sum(counts[: s + 1]))}
    assert set(whole[:split]) == in_first
    window = whole[:16]  # two blocks' samples, shuffled together
    assert len({x // 8 for x in window}) == 2  # (blocks: global index // 8)
    assert window != sorted(window)
    assert list(BlockOrder(counts, 8, 3, 2, True).from_position(0)) != whole  # a new epoch
    assert list(BlockOrder(counts, 8, 3, 1, False).from_position(0)) == list(range(120))


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (1, 2)])
def test_a_resume_on_another_number_of_processes_consumes_each_sample_once(before, after):
    counts, batch = [37, 41, 22], 4
    samplers = [BlockOrderSampler(counts, 8, before, r, seed=5) for r in range(before)]
    iters = [iter(s) for s in samplers]
    seen = [i for _ in range(5) for it in iters for i in [next(it) for _ in range(batch)]]
    state = samplers[0].state_dict()
    assert state["position"] == 5 * batch * before
    rest = []
    for r in range(after):
        s = BlockOrderSampler(counts, 8, after, r, seed=5)
        s.load_state_dict(state)
        rest += list(s)
    assert max(Counter(seen + rest).values()) == 1  # nothing twice: no padding
    dropped = (100 - len(seen)) % after  # the epoch's rest cut to a multiple of `after`
    order = samplers[0].order()
    assert sorted(seen + rest) == sorted(order[: 100 - dropped])


def test_the_cache_stays_under_its_bound_and_a_killed_write_leaves_nothing(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "tmpabc.partial").write_bytes(b"half")  # a writer killed mid-block
    cache = BlockCache(tmp_path / "c", max_bytes=250)
    assert not list((tmp_path / "c").glob("*.partial"))
    for i in range(5):
        cache.put(f"k{i}", bytes(100))
    assert cache.size() <= 250 and cache.get("k4") == bytes(100) and cache.get("k0") is None


def test_a_streamed_read_fills_the_cache_and_reads_it_back(tmp_path):
    write_shards(pairs(100), str(tmp_path / "ds"), samples_per_shard=50, samples_per_block=10)
    data = ShardedDataset(str(tmp_path / "ds"), cache_dir=str(tmp_path / "cache"))
    assert data[42][1] == 42
    cached = sorted(p.name.split("-", 1)[1] for p in (tmp_path / "cache").glob("*.blk"))
    assert cached == ["shard-00000.lfs-4.blk", "shard-00000.lfs-header.blk"]
    again = ReadsCounted(str(tmp_path / "ds"), cache_dir=str(tmp_path / "cache"))
    assert again[45][1] == 45 and again.reads == []  # as after a restart: nothing fetched
    assert again[0][1] == 0 and len(again.reads) == 1  # another block: its range only


class ReadsCounted(ShardedDataset):
    """A dataset that notes each (start, end) it reads from the store."""

    reads: list[tuple[int | None, int | None]]

    def _fetch(self, name, start=None, end=None, **kwargs):
        if name != INDEX:
            self.reads.append((start, end))
        return super()._fetch(name, start, end, **kwargs)

    def _read_index(self):
        self.reads = []
        return super()._read_index()


def test_bad_input_is_one_line(tmp_path, s3):
    with pytest.raises(ConfigError, match=f"no {INDEX} there"):
        ShardedDataset(str(tmp_path / "nothing"))
    write_shards(pairs(10), str(tmp_path / "old"))
    record = json.loads((tmp_path / "old" / INDEX).read_text())
    (tmp_path / "old" / INDEX).write_text(json.dumps({**record, "version": 99}))
    with pytest.raises(ConfigError, match="format version 99, this litforge reads version 2"):
        ShardedDataset(str(tmp_path / "old"))
    with pytest.raises(ConfigError, match="already holds shards"):
        write_shards(pairs(10), str(tmp_path / "old"))


def test_a_store_that_goes_away_is_retried_then_one_line(tmp_path, s3):
    url = "s3://litforge/shards/outage"
    write_shards(pairs(40), url, samples_per_shard=20, samples_per_block=10)
    data = ShardedDataset(url, retries=2, backoff_s=0.01)
    assert data[0][1] == 0
    s3.stop()
    with pytest.raises(DataStoreUnreachable, match=r"failed 3 time\(s\)"):
        data._blocks.clear()
        data[25]


def test_blocks_are_columns_when_samples_share_a_structure_and_lists_otherwise():
    from litforge.data.shards.format import decode_block, encode_block

    same = [(torch.randn(2, 3), torch.tensor(i), i, f"s{i}",
             {"m": torch.arange(3, dtype=torch.bfloat16) + i}) for i in range(5)]  # fmt: skip
    block = encode_block(same)
    assert block[:4] == b"LFCB"  # JSON and raw bytes: nothing unpickled on load
    for want, got in zip(same, decode_block(block, 5), strict=True):
        assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
        assert (want[2], want[3]) == (got[2], got[3]) and isinstance(got, tuple)
        assert torch.equal(want[4]["m"], got[4]["m"]) and got[4]["m"].dtype == torch.bfloat16
    pairs_ = [(torch.ones(2), 1), (torch.ones(2), 2)]
    assert [y for _, y in decode_block(encode_block(pairs_), 2)] == [1, 2]
    ragged = [torch.zeros(2), torch.zeros(3)]  # shapes differ: the list, torch.save'd
    assert encode_block(ragged)[:4] != b"LFCB"
    assert [t.shape[0] for t in decode_block(encode_block(ragged), 2)] == [2, 3]


def test_the_data_wait_warning_names_the_streaming_knobs(tmp_path):
    from torch.utils.data import DataLoader

    from litforge.monitors.data_wait import _dataset_advice

    write_shards(pairs(10), str(tmp_path / "ds"), samples_per_block=5)
    said = _dataset_advice(DataLoader(ShardedDataset(str(tmp_path / "ds"))))
    assert f"streamed from {tmp_path / 'ds'}: data.num_workers=N" in said
    for knob in ("data.prefetch_factor=K", "data.cache_dir=", "--samples-per-block (now 5)"):
        assert knob in said
    assert _dataset_advice(DataLoader(list(range(3)))) == ""  # in memory: nothing more to say


def test_writing_where_the_credentials_are_refused_is_one_line_before_encoding(
    s3_wrong_secret,
):
    encoded = []

    def samples():
        for i in range(3):
            encoded.append(i)
            yield torch.zeros(2)

    with pytest.raises(ConfigError, match=r"^s3://litforge/x: cannot write there .*"
                       r"AWS_SECRET_ACCESS_KEY"):  # fmt: skip
        write_shards(samples(), "s3://litforge/x")
    assert encoded == []
