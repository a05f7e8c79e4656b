"""The sample order of a sharded dataset: a permutation of its shards, then of the blocks
inside each shard, seeded by (seed, epoch), drawn lazily from any position.

Samples inside a block stay in order, so consecutive indices are one block read. The
order is never materialized: a position is found through the shards' sizes (one pass
over the shard list), so starting at 90% of an epoch costs what starting at 10% does.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator

import torch

from litforge.data.global_order import GlobalOrderSampler

_MASK = (1 << 63) - 1


def _perm(n: int, seed: int) -> list[int]:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed & _MASK)).tolist()


class BlockOrder:
    """Epoch `epoch`'s order of the samples of shards with `counts` samples each."""

    def __init__(self, counts: list[int], block: int, seed: int, epoch: int, shuffle: bool) -> None:
        self.counts, self.block, self.shuffle = counts, block, shuffle
        self.key = seed * 1_000_003 + epoch
        self.starts = list(itertools.accumulate([0, *counts]))  # shard -> first global index
        self.shard_order = _perm(len(counts), self.key) if shuffle else list(range(len(counts)))
        ordered = [counts[s] for s in self.shard_order]
        self.position_starts = list(itertools.accumulate([0, *ordered]))  # slot -> position
        self.size = self.starts[-1]

    def blocks_of(self, shard: int) -> list[int]:
        n = math.ceil(self.counts[shard] / self.block)
        return _perm(n, self.key * 1_000_033 + shard) if self.shuffle else list(range(n))

    def from_position(self, position: int) -> Iterator[int]:
        """Global sample indices of the order from `position` to the end."""
        if position >= self.size:
            return
        slot = bisect.bisect_right(self.position_starts, position) - 1
        offset = position - self.position_starts[slot]
        for s in self.shard_order[slot:]:
            blocks, count, first = self.blocks_of(s), self.counts[s], self.starts[s]
            sizes = [min(self.block, count - b * self.block) for b in blocks]
            for b, size in zip(blocks, sizes, strict=True):
                if offset >= size:
                    offset -= size
                    continue
                base = first + b * self.block
                yield from range(base + offset, base + size)
                offset = 0


class BlockOrderSampler(GlobalOrderSampler):
    """`GlobalOrderSampler`'s position, padding and rank striding over a `BlockOrder`
    instead of one randperm of the whole dataset (which does not scale to 10^9 samples)."""

    def __init__(self, counts: list[int], block: int, num_replicas: int = 1, rank: int = 0,
                 seed: int = 0, shuffle: bool = True) -> None:  # fmt: skip
        super().__init__(sum(counts), num_replicas, rank, seed, shuffle)
        self.counts, self.block = counts, block

    def order(self) -> list[int]:
        return list(self._order().from_position(0))

    def _order(self) -> BlockOrder:
        return BlockOrder(self.counts, self.block, self.seed, self.epoch, self.shuffle)

    def __iter__(self) -> Iterator[int]:
        order = self._order()
        left = self.size - self.start
        total = self.start + math.ceil(left / self.num_replicas) * self.num_replicas
        # From this rank's first position; past the end, the order's start again (padding,
        # as DistributedSampler pads with its first indices).
        first = self.start + self.rank
        stream = itertools.chain(
            order.from_position(first), order.from_position(max(0, first - order.size))
        )
        self._yielded = 0
        for index in itertools.islice(stream, 0, max(0, total - first), self.num_replicas):
            self._yielded += 1
            yield index
