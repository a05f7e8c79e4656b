"""Weighted mixtures of sharded streams: the draw follows the weights, any position is
reached without a replay, and a resume on another shape consumes each sample once."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from litforge.data.shards.datamodule import parse_streams
from litforge.data.shards.mixture import MixtureDataset, MixtureSampler, apportion, schedule
from litforge.data.shards.reader import ShardedDataset
from litforge.data.shards.writer import write_shards
from litforge.errors import ConfigError


def mixture(tmp_path, sizes=(120, 45)) -> MixtureDataset:
    streams = []
    for k, n in enumerate(sizes):
        url = str(tmp_path / f"s{k}")
        write_shards([torch.tensor([k, i]) for i in range(n)], url, samples_per_shard=32,
                     samples_per_block=8)  # fmt: skip
        streams.append(ShardedDataset(url))
    return MixtureDataset(streams)


def test_the_schedule_follows_the_weights_evenly():
    assert apportion([3, 1]) == [750, 250] and sum(apportion([1, 1, 1])) == 1000
    assert apportion([1e-9, 1]) == [1, 999]  # a positive weight is never drawn zero times
    turns = schedule([3, 1])
    assert turns == [0, 0, 1, 0]  # stream 0 at 1/6, 1/2, 5/6; stream 1 at 1/2
    assert max(len(run) for run in "".join(map(str, schedule(apportion([3, 1])))).split("1")) <= 3


def test_a_mixture_draws_by_weight_and_seeks_any_position(tmp_path):
    data = mixture(tmp_path)
    sampler = MixtureSampler(data, [1.0, 1.0], epoch_samples=200, seed=4)
    whole = sampler.order()
    streams = Counter(int(data[i][0]) for i in whole)
    assert streams == {0: 100, 1: 100}  # even weights: 45 samples of stream 1 go round twice+
    ones = [int(data[i][1]) for i in whole if int(data[i][0]) == 1]
    assert Counter(ones[:45]) == Counter(range(45)) == Counter(ones[45:90])  # once, then again
    for position in (0, 1, 57, 199):
        assert list(sampler._order().from_position(position)) == whole[position:]
    sampler.set_epoch(1)  # stream 0 goes on with the 20 it had not given, then repeats
    next_epoch = sampler.order()
    zeros = [data.locate(i) for i in whole + next_epoch if int(data[i][0]) == 0]
    assert len(set(zeros[:120])) == 120


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (1, 2)])
def test_a_mixture_resumed_on_another_number_of_processes_consumes_each_once(
    tmp_path, before, after
):
    data, batch = mixture(tmp_path), 4
    weights = [2.0, 1.0]

    def sampler(world: int, rank: int) -> MixtureSampler:
        return MixtureSampler(data, weights, epoch_samples=165, num_replicas=world, rank=rank,
                              seed=9)  # fmt: skip

    samplers = [sampler(before, r) for r in range(before)]
    iters = [iter(s) for s in samplers]
    seen = [i for _ in range(6) for it in iters for i in [next(it) for _ in range(batch)]]
    state = samplers[0].state_dict()
    rest = []
    for r in range(after):
        resumed = sampler(after, r)
        resumed.load_state_dict(state)
        rest += list(resumed)
    # The uninterrupted order's positions, less the epoch's rest cut to a multiple of
    # `after` processes (no padding: no position twice).
    dropped = (165 - len(seen)) % after
    assert Counter(seen + rest) == Counter(sampler(1, 0).order()[: 165 - dropped])


def test_bad_streams_are_one_line_naming_the_key():
    assert parse_streams("s3://b/x", None) == [("s3://b/x", 1.0)]
    with pytest.raises(ConfigError, match=r"^data: give data.url .* not both or neither$"):
        parse_streams("a", [{"url": "b"}])
    with pytest.raises(ConfigError, match=r"^data.streams\[1\].weight=0 must be a positive"):
        parse_streams(None, [{"url": "a", "weight": 2}, {"url": "b", "weight": 0}])
    with pytest.raises(ConfigError, match=r"^data.streams\[0\].weight='x' must be a positive"):
        parse_streams(None, [{"url": "a", "weight": "x"}])
    with pytest.raises(ConfigError, match=r"^data.streams\[0\] has unknown keys \['wieght'\]"):
        parse_streams(None, [{"url": "a", "wieght": 1}])
    with pytest.raises(ConfigError, match=r"^data.streams\[0\]='a' must be a mapping"):
        parse_streams(None, ["a"])


def test_a_mixture_listing_one_url_twice_is_one_line_naming_it():
    streams = [{"url": "s3://b/x", "weight": 2}, {"url": "s3://b/y"}, {"url": "s3://b/x/"}]
    with pytest.raises(ConfigError, match=r"^data.streams\[2\].url=s3://b/x is listed twice "
                       r"\(also data.streams\[0\]\): list each directory once, with the "
                       r"weight it should have$"):  # fmt: skip
        parse_streams(None, streams)
    secret = [{"url": "s3://key:secret@b/x"}, {"url": "s3://key:secret@b/x"}]
    with pytest.raises(ConfigError, match=r"^data.streams\[1\].url=s3://b/x is listed") as err:
        parse_streams(None, secret)
    assert "secret" not in str(err.value)


def test_a_stream_datamodule_says_what_does_not_fit_before_training(tmp_path):
    from litforge.data.shards.datamodule import StreamDataModule
    from litforge_examples.data.text import TextStream, TokenWindows

    ids = torch.arange(1000) % 128
    for split in ("train", "val", "test"):
        write_shards(TokenWindows(ids, 16), str(tmp_path / "text" / split),
                     provides="token windows", meta={"block_size": 16})  # fmt: skip
    assert TextStream(str(tmp_path / "text"), block_size=16).block_size == 16
    with pytest.raises(ConfigError, match=r"^data.block_size=32, but the shards at .* hold "
                       r"windows of 16: set data.block_size=16"):  # fmt: skip
        TextStream(str(tmp_path / "text"), block_size=32)
    with pytest.raises(ConfigError, match=r"^data.epoch_samples=10 is for a mixture"):
        StreamDataModule(str(tmp_path / "text"), epoch_samples=10)


def test_stream_args_list_every_keyword_of_the_stream_datamodule():
    import inspect

    from litforge.data.loaders import LoaderArgs
    from litforge.data.shards.datamodule import StreamArgs, StreamDataModule

    params = set(inspect.signature(StreamDataModule.__init__).parameters)
    own = set(StreamArgs.__annotations__) - set(LoaderArgs.__annotations__)
    assert own == params - {"self", "url", "batch_size", "loader"}


@pytest.mark.parametrize(("workers", "expected"), [(2, 5), (0, None)])
def test_data_prefetch_factor_reaches_the_loader(tmp_path, workers, expected):
    import lightning as L

    from litforge.data.shards.datamodule import StreamDataModule
    from litforge_examples.data.text import TokenWindows

    for split in ("train", "val", "test"):
        write_shards(TokenWindows(torch.arange(200) % 64, 8), str(tmp_path / split))
    data = StreamDataModule(str(tmp_path), batch_size=4, num_workers=workers, prefetch_factor=5)
    data.trainer = L.Trainer(accelerator="cpu", devices=1, logger=False)
    data.setup("fit")
    assert data.train_dataloader().prefetch_factor == expected  # torch refuses one at 0 workers
