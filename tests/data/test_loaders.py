"""Training order, DDP sharding and mid-epoch resume of the DataModules' loaders.

A real Trainer is not needed to build a sampler: `train_loader` only reads
`world_size`, `global_rank` and `current_epoch`, so a namespace stands in for it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

from litforge.data.loaders import eval_loader, train_loader
from litforge_examples.data.digits import DigitsDataModule
from litforge_examples.data.text import TextDataModule


def fake_trainer(world_size: int = 1, rank: int = 0, epoch: int = 0) -> SimpleNamespace:
    return SimpleNamespace(world_size=world_size, global_rank=rank, current_epoch=epoch)


def index_dataset(n: int) -> TensorDataset:
    """Item i is the tensor i, so a batch shows which indices it holds."""
    return TensorDataset(torch.arange(n))


def batches(loader) -> list[torch.Tensor]:
    return [batch[0] for batch in loader]


def order(loader) -> list[int]:
    return torch.cat(batches(loader)).tolist()


def make(n=100, seed=0, shuffle=True, batch_size=8, **trainer):
    return train_loader(index_dataset(n), fake_trainer(**trainer), batch_size, 0, seed, shuffle)


def test_one_process_epoch_is_a_permutation_in_batches():
    loader = make(n=100, batch_size=8)
    got = batches(loader)
    assert [len(b) for b in got] == [8] * 12 + [4]
    flat = torch.cat(got).tolist()
    assert sorted(flat) == list(range(100))
    assert flat != list(range(100))


def test_same_seed_same_batches_regardless_of_global_rng():
    torch.manual_seed(1)
    first = batches(make(seed=3))
    torch.manual_seed(2)
    second = batches(make(seed=3))
    assert len(first) == len(second)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_other_seed_other_order():
    assert order(make(seed=3)) != order(make(seed=4))


def test_epoch_changes_order_and_the_trainer_epoch_is_applied():
    loader = make(seed=3)
    epoch0 = order(loader)
    loader.sampler.set_epoch(1)
    epoch1 = order(loader)
    assert epoch0 != epoch1 and sorted(epoch1) == sorted(epoch0)
    # A loader built at epoch 1 (as on resume) already holds epoch 1's order.
    built_at_1 = make(seed=3, epoch=1)
    assert built_at_1.sampler.epoch == 1
    assert order(built_at_1) == epoch1


def test_shuffle_false_keeps_dataset_order():
    assert order(make(n=50, shuffle=False)) == list(range(50))


@pytest.mark.parametrize("n", [100, 1197])  # divisible by two ranks, and not
def test_two_ranks_shard_disjointly_and_cover_the_training_set(n):
    ranks = [order(make(n=n, seed=5, world_size=2, rank=r)) for r in (0, 1)]
    per_rank = n // 2
    dropped = n - 2 * per_rank
    assert [len(r) for r in ranks] == [per_rank, per_rank]
    # Nothing repeated (no padding): the epoch's last `dropped` indices are left out.
    assert set(ranks[0]).isdisjoint(ranks[1])
    whole = make(n=n, seed=5).sampler.order()
    assert set(ranks[0]) | set(ranks[1]) == set(whole[: n - dropped])
    # A new epoch reshuffles every shard, and leaves out other samples.
    epoch1 = [order(make(n=n, seed=5, world_size=2, rank=r, epoch=1)) for r in (0, 1)]
    assert epoch1[0] != ranks[0] and epoch1[1] != ranks[1]
    assert set(epoch1[0]).isdisjoint(epoch1[1])
    assert len(set(epoch1[0]) | set(epoch1[1])) == n - dropped


def test_datamodule_shards_the_digits_training_set_across_two_ranks():
    shards = []
    for rank in (0, 1):
        dm = DigitsDataModule(batch_size=64, shuffle_seed=7)
        dm.setup("fit")
        dm.trainer = fake_trainer(world_size=2, rank=rank)
        loader = dm.train_dataloader()
        indices = list(loader.sampler)
        images = torch.cat([x for x, _ in loader])
        assert torch.equal(images, dm.train_set.tensors[0][indices])
        shards.append(indices)
    n = len(dm.train_set)
    assert n == 1197
    assert len(shards[0]) == len(shards[1]) == 598  # the epoch's 1197th sample is dropped
    assert set(shards[0]).isdisjoint(shards[1])  # nothing repeated as padding


def test_eval_loaders_are_in_order_and_unsharded():
    dm = DigitsDataModule(batch_size=64)
    dm.setup("fit")
    dm.trainer = fake_trainer(world_size=2, rank=1)
    for loader, split in ((dm.val_dataloader(), dm.val_set), (dm.test_dataloader(), dm.test_set)):
        images, labels = (torch.cat(parts) for parts in zip(*loader, strict=True))
        assert torch.equal(images, split.tensors[0])
        assert torch.equal(labels, split.tensors[1])
    assert order(eval_loader(index_dataset(30), 7, 0)) == list(range(30))


def test_datamodule_order_depends_only_on_shuffle_seed():
    def first_batch(shuffle_seed: int) -> torch.Tensor:
        dm = TextDataModule(block_size=32, batch_size=4, shuffle_seed=shuffle_seed)
        dm.setup("fit")
        dm.trainer = fake_trainer()
        x, y = next(iter(dm.train_dataloader()))
        assert x.shape == y.shape == (4, 32)
        return x

    assert torch.equal(first_batch(1), first_batch(1))
    assert not torch.equal(first_batch(1), first_batch(2))


@pytest.mark.parametrize(
    "trainer", [{}, {"world_size": 2, "rank": 1, "epoch": 3}], ids=["single", "rank1-epoch3"]
)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_dict_round_trip_resumes_with_exactly_the_remaining_batches(trainer, num_workers):
    def build():
        return train_loader(index_dataset(101), fake_trainer(**trainer), 6, num_workers, 11)

    loader = build()
    it = iter(loader)
    seen = [next(it)[0] for _ in range(3)]
    state = loader.state_dict()
    remaining = [batch[0] for batch in it]
    assert remaining, "the epoch must not be over yet"

    resumed = build()
    resumed.load_state_dict(state)
    replayed = batches(resumed)
    assert len(replayed) == len(remaining)
    assert all(torch.equal(a, b) for a, b in zip(replayed, remaining, strict=True))
    # Together with the batches before the save, it is exactly one full epoch.
    assert torch.equal(torch.cat(seen + replayed), torch.cat(batches(build())))
