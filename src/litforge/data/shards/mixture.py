"""Two or more streams (of any format) drawn by weight, in one order that resumes exactly
like one stream's: the position is a count of samples over all processes, on any shape.

The schedule repeats every `PERIOD` positions: stream i takes n_i of them (its weight's
share, largest remainder), spread evenly. So how many samples each stream gave before any
position is arithmetic, not a replay, and a resume at 90% of an epoch costs what one at 10%
does. Each stream is read in its own `BlockOrder`; a stream drawn more often than it has
samples starts its next permutation (seeded by how many it has gone through), one drawn
less continues its permutation in the next epoch: every sample of a stream comes once
before any comes twice.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import Dataset

from litforge.data.formats.source import StreamSource
from litforge.data.shards.order import WINDOW, BlockOrder, LazyOrderSampler

PERIOD = 1000  # positions per repetition of the stream schedule


def apportion(weights: Sequence[float], period: int = PERIOD) -> list[int]:
    """Positions per period of each stream: proportional to its weight (largest
    remainder), at least one each."""
    total = sum(weights)
    exact = [w / total * period for w in weights]
    counts = [max(1, math.floor(e)) for e in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: counts[i] - exact[i])
    for i in itertools.islice(itertools.cycle(by_remainder), max(0, period - sum(counts))):
        counts[i] += 1
    while sum(counts) > period:  # the minimum of one overshot: take from the largest
        counts[counts.index(max(counts))] -= 1
    return counts


def schedule(counts: Sequence[int]) -> list[int]:
    """One period's stream per position: stream i's j-th turn at (j + 1/2) / n_i."""
    turns = [((j + 0.5) / n, i) for i, n in enumerate(counts) for j in range(n)]
    return [i for _, i in sorted(turns)]


class MixtureDataset(Dataset):
    """The streams' samples one after another: stream i's sample j at `offsets[i] + j`
    (streams of any format: litforge's shards, Parquet, WebDataset)."""

    def __init__(self, streams: Sequence[StreamSource]) -> None:
        self.streams = list(streams)
        self.offsets = list(itertools.accumulate([0, *(len(s) for s in self.streams)]))

    def __len__(self) -> int:
        return self.offsets[-1]

    def __getitem__(self, index: int) -> Any:
        stream = bisect.bisect_right(self.offsets, index) - 1
        return self.streams[stream][index - self.offsets[stream]]

    def stall_advice(self) -> str:  # litforge.hooks.AdvisesOnStalls
        return self.streams[0].stall_advice()

    def locate(self, index: int) -> tuple[str, int]:
        stream = bisect.bisect_right(self.offsets, index) - 1
        return self.streams[stream].locate(index - self.offsets[stream])


class MixtureOrder:
    """Epoch `epoch`'s `size` positions over streams of `sizes` samples (shard `counts`,
    `blocks` samples per block), drawn by `weights`."""

    def __init__(self, counts: Sequence[Sequence[int]], blocks: Sequence[int],
                 weights: Sequence[float], size: int, seed: int, epoch: int,
                 shuffle: bool, window: int = WINDOW) -> None:  # fmt: skip
        self.counts, self.blocks, self.size, self.window = counts, blocks, size, window
        self.seed, self.epoch, self.shuffle = seed, epoch, shuffle
        self.sizes = [sum(c) for c in counts]
        self.offsets = list(itertools.accumulate([0, *self.sizes]))
        self.per_period = apportion(weights)
        self.turns = schedule(self.per_period)

    def drawn_before(self, position: int) -> list[int]:
        """Samples each stream gave before global position `position` (all epochs)."""
        full, rest = divmod(position, len(self.turns))
        drawn = [full * n for n in self.per_period]
        for stream in self.turns[:rest]:
            drawn[stream] += 1
        return drawn

    def _stream(self, stream: int, drawn: int) -> Iterator[int]:
        """Stream `stream`'s indices (into the mixture) from its `drawn`-th sample on."""
        cycle, offset = divmod(drawn, self.sizes[stream])
        seed = self.seed * 1_000_037 + stream
        while True:
            order = BlockOrder(list(self.counts[stream]), self.blocks[stream], seed, cycle,
                               self.shuffle, self.window)  # fmt: skip
            for index in order.from_position(offset):
                yield self.offsets[stream] + index
            cycle, offset = cycle + 1, 0

    def from_position(self, position: int) -> Iterator[int]:
        start, end = self.epoch * self.size + position, (self.epoch + 1) * self.size
        if start >= end:
            return
        drawn = self.drawn_before(start)
        streams = [self._stream(i, n) for i, n in enumerate(drawn)]  # lazy: nothing read yet
        period = len(self.turns)
        for at in range(start, end):
            yield next(streams[self.turns[at % period]])


class MixtureSampler(LazyOrderSampler):
    """`epoch_samples` positions an epoch over the streams of `data` by `weights`."""

    def __init__(self, data: MixtureDataset, weights: Sequence[float], epoch_samples: int,
                 num_replicas: int = 1, rank: int = 0, seed: int = 0,
                 shuffle: bool = True, window: int = WINDOW) -> None:  # fmt: skip
        super().__init__(epoch_samples, num_replicas, rank, seed, shuffle)
        self.window = window
        self.counts = [s.counts for s in data.streams]
        self.blocks = [s.index.samples_per_block for s in data.streams]
        self.weights = list(weights)

    def _order(self) -> MixtureOrder:
        return MixtureOrder(self.counts, self.blocks, self.weights, self.size, self.seed,
                            self.epoch, self.shuffle, self.window)  # fmt: skip
