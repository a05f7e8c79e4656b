"""An epoch whose sample count does not divide by processes x batch repeats no sample:
its rest beyond a multiple of the processes is dropped (other samples each epoch), and
every rank still yields as many batches. Ranks are simulated in this process through the
samplers' rank and world arguments."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from litforge.data.global_order import GlobalOrderSampler
from litforge.data.loaders import train_loader
from litforge.data.shards.mixture import MixtureSampler
from litforge.data.shards.order import BlockOrderSampler
from litforge.errors import ConfigError
from litforge_examples.data.digits import DigitsDataModule
from tests.data.test_loaders import fake_trainer
from tests.data.test_mixture import mixture


def over_ranks(make, world: int, epoch: int = 0) -> list[list[int]]:
    """Each rank's indices of epoch `epoch`, from samplers `make(world, rank)`."""
    ranks = []
    for rank in range(world):
        sampler = make(world, rank)
        sampler.set_epoch(epoch)
        ranks.append(list(sampler))
    return ranks


@pytest.mark.parametrize("world", [2, 3])
def test_a_sharded_epoch_of_101_samples_repeats_none(world):
    def make(n, r):
        return BlockOrderSampler([40, 37, 24], 8, n, r, seed=2)

    dropped = set()
    for epoch in (0, 1):
        ranks = over_ranks(make, world, epoch)
        assert len({len(r) for r in ranks}) == 1  # as many per rank: no rank waits
        seen = Counter(i for r in ranks for i in r)
        assert max(seen.values()) == 1 and len(seen) == 101 - 101 % world
        dropped |= set(range(101)) - set(seen)
    assert len(dropped) == 2 * (101 % world)  # the dropped ones change with the epoch


def test_the_shipped_digits_on_two_processes_repeat_none():
    ranks = []
    for rank in (0, 1):
        digits = DigitsDataModule(batch_size=64, shuffle_seed=3)
        digits.setup("fit")
        digits.trainer = fake_trainer(world_size=2, rank=rank)
        loader = digits.train_dataloader()
        ranks.append(list(loader.sampler))  # the indices its batches come from
        assert len(loader) == len(list(loader)) == 10  # 598 per process, in batches of 64
    seen = Counter(ranks[0] + ranks[1])
    assert len(seen) == 1196 and max(seen.values()) == 1  # 1,197 samples: one dropped


def test_a_mixture_epoch_repeats_no_position(tmp_path):
    data = mixture(tmp_path)

    def make(n, r):
        return MixtureSampler(data, [2.0, 1.0], epoch_samples=101, num_replicas=n, rank=r, seed=1)

    ranks = over_ranks(make, 2)
    whole = make(1, 0).order()
    # Every position of the epoch but the last, once; the streams' own draws stay as the
    # weights say (a stream drawn more often than it has samples is the mixture's rule).
    assert len(ranks[0]) == len(ranks[1]) == 50
    assert Counter(ranks[0] + ranks[1]) == Counter(whole[:100])


def test_fewer_samples_than_processes_is_one_line():
    sampler = GlobalOrderSampler(2, num_replicas=3, rank=0)
    with pytest.raises(ConfigError, match=r"^the training data has 2 sample\(s\) per epoch, "
                       r"fewer than the 3 processes: each process needs at least one"):  # fmt: skip
        train_loader(torch.arange(2), fake_trainer(3, 0), 1, 0, 0, sampler=sampler)
