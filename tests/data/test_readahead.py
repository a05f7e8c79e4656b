"""Read-ahead: the order's next blocks fetched as large range requests in the background.
The samples are byte for byte those of one request per block, in fewer requests, within
the bounds on bytes held and cached; a damaged block inside a range is still one line."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.utils.data import DataLoader

from litforge.data.shards.mixture import MixtureDataset, MixtureSampler
from litforge.data.shards.order import BlockOrderSampler, Planned
from litforge.data.shards.reader import DamagedShards, ShardedDataset
from litforge.data.shards.writer import write_shards

PER_BLOCK, PER_SHARD, SAMPLES = 8, 40, 480  # 12 shards of 5 blocks


class Counted(ShardedDataset):
    """A dataset that counts its requests to the store (the index's too), from any thread."""

    def _fetch(self, name, start=None, end=None, **kwargs):
        with self.lock:
            self.requests += 1
        return super()._fetch(name, start, end, **kwargs)

    def _read_index(self):
        self.lock, self.requests = threading.Lock(), 0
        return super()._read_index()


def write(url: str, samples: int = SAMPLES) -> None:
    data = [(torch.randn(3, generator=torch.Generator().manual_seed(i)), i) for i in range(samples)]
    write_shards(data, url, samples_per_shard=PER_SHARD, samples_per_block=PER_BLOCK)


def as_bytes(sample) -> tuple[bytes, int]:
    x, label = sample
    return x.numpy().tobytes(), label


def epoch(data, seed: int = 1, epoch_: int = 0) -> list[int]:
    sampler = BlockOrderSampler(data.counts, data.index.samples_per_block, seed=seed, window=2)
    sampler.set_epoch(epoch_)
    return list(sampler)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_read_ahead_gives_the_samples_of_one_request_per_block_in_far_fewer_requests(
    where, tmp_path, request
):
    url = str(tmp_path / "ds") if where == "local" else "s3://litforge/readahead/ds"
    if where == "s3":
        request.getfixturevalue("s3")
    write(url)
    ahead, alone = Counted(url), Counted(url, readahead_bytes=0)
    indices = epoch(ahead)
    assert all(isinstance(i, Planned) for i in indices)
    got = [as_bytes(ahead[i]) for i in indices]
    want = [as_bytes(alone[int(i)]) for i in indices]  # plain ints: one request per block
    assert got == want and sorted(label for _, label in got) == list(range(SAMPLES))
    # One request per block, plus two per shard for its header (its size, then its first
    # 64 KiB, which hold the header), plus the index: 60 + 24 + 1. Read ahead: a range per
    # shard, with the same header reads.
    assert alone.requests == 85
    assert ahead.requests <= 1 + 2 * 12 + 12 and ahead._ahead.ranges <= 12


def test_read_ahead_stays_within_its_memory_and_cache_bounds(tmp_path):
    write(str(tmp_path / "ds"))
    block = (tmp_path / "ds" / "shard-00000.lfs").stat().st_size // 5  # about one block
    budget, cache_bytes = 6 * block, 10 * block
    data = ShardedDataset(str(tmp_path / "ds"), cache_dir=str(tmp_path / "cache"),
                          cache_bytes=cache_bytes, readahead_bytes=budget)  # fmt: skip
    reference = ShardedDataset(str(tmp_path / "ds"), readahead_bytes=0)
    for i in epoch(data):
        assert as_bytes(data[i]) == as_bytes(reference[int(i)])
        largest = max(o[b + 1] - o[b] for o, _ in data._headers.values() for b in range(len(o) - 1))
        assert data._ahead.held <= max(budget, largest)
        assert data._cache.size() <= cache_bytes
    assert 0 < data._ahead.peak <= budget


def test_a_damaged_block_inside_a_range_is_one_line_naming_the_file(tmp_path):
    write(str(tmp_path / "ds"))
    shard = tmp_path / "ds" / "shard-00003.lfs"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0xFF  # the last block's last byte
    shard.write_bytes(bytes(raw))
    data = ShardedDataset(str(tmp_path / "ds"), retries=3, backoff_s=30)  # no retry: 30 s
    with pytest.raises(DamagedShards) as raised:
        for i in epoch(data):
            data[i]
    assert data._ahead.ranges <= 12  # it came in a range of several blocks
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{shard}: damaged: block 4 (bytes "), message
    assert message.endswith("does not match its digest; rewrite the dataset with "
                            "`litforge shards write`")  # fmt: skip


def test_loader_workers_read_ahead_each_epoch_and_give_the_same_batches(tmp_path):
    write(str(tmp_path / "ds"))
    data = ShardedDataset(str(tmp_path / "ds"))
    sampler = BlockOrderSampler(data.counts, PER_BLOCK, seed=2, window=2)

    def batches(workers: int) -> list[list[int]]:
        loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=workers,
                            persistent_workers=workers > 0)  # fmt: skip
        out = []
        for e in range(2):  # persistent workers: their dataset copy is from epoch 0
            sampler.set_epoch(e)
            out += [batch[1].tolist() for batch in loader]
        return out

    assert batches(2) == batches(0)
    assert batches(0)[:30] != batches(0)[30:]  # the epochs' orders differ


def test_a_mixture_reads_each_stream_ahead(tmp_path):
    write(str(tmp_path / "a"))
    write(str(tmp_path / "b"), samples=200)
    mixture = MixtureDataset([ShardedDataset(str(tmp_path / s)) for s in "ab"])
    alone = MixtureDataset([ShardedDataset(str(tmp_path / s), readahead_bytes=0) for s in "ab"])
    sampler = MixtureSampler(mixture, [2.0, 1.0], 900, seed=3, window=2)  # b drawn past its size
    indices = list(sampler)
    assert [as_bytes(mixture[i]) for i in indices] == [as_bytes(alone[int(i)]) for i in indices]
    assert all(s._ahead is not None and s._ahead.ranges > 0 for s in mixture.streams)


def test_an_index_keeps_its_plan_through_an_offset_and_pickling():
    import pickle

    plan = BlockOrderSampler([16], 8, seed=0)._order().plan
    index = Planned(5, plan)
    # Equal plans, not the same object: an index's plan is its kind's (one per equal plan).
    assert (index + 10).plan == plan and (10 + index).plan == plan and (index - 2).plan == plan
    assert index + 10 == 15 and type(index + 0.5) is float
    batch = pickle.loads(pickle.dumps([Planned(i, plan) for i in range(64)]))
    assert batch == list(range(64)) and len({id(i.plan) for i in batch}) == 1


def test_a_batch_read_at_once_is_the_samples_read_one_by_one(tmp_path):
    # The DataLoader's fetcher asks a dataset with __getitems__ for a whole batch.
    write(str(tmp_path / "ds"))
    batched, single = ShardedDataset(str(tmp_path / "ds")), ShardedDataset(str(tmp_path / "ds"))
    indices = epoch(batched)
    got = [
        as_bytes(s)
        for b in range(0, SAMPLES, 64)
        for s in batched.__getitems__(indices[b : b + 64])
    ]
    assert got == [as_bytes(single[int(i)]) for i in indices]
    with pytest.raises(IndexError):
        batched.__getitems__([0, SAMPLES])
    loader = DataLoader(batched, batch_size=64, sampler=indices)
    assert torch.cat([y for _, y in loader]).tolist() == [
        as_bytes(single[int(i)])[1] for i in indices
    ]
