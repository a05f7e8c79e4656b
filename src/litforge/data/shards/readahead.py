"""Read-ahead for a sharded dataset: the next blocks of the order, fetched in the
background as few, large range requests, a few at a time, within a bound on the bytes
held.

The reader learns what comes next from the sample index it is asked for: the sampler's
indices carry their order's plan (`order.Planned`), so the reading process (the main one,
or a DataLoader worker whose dataset copy is a run old) rebuilds the epoch's `BlockOrder`
and finds the window it stands in. From there it takes the order's next blocks while
their bytes fit in `budget`, groups them by shard, and fetches each run of consecutive
blocks of a shard as one range (at most `max_range` bytes, so several run at once). Each
block of a range is checked against its digest and written to the disk cache on arrival,
and handed out once; blocks of windows the reader has passed are dropped. It refills
only when half the budget is free, so each refill reaches far enough ahead for long runs.

A thread pool, not fsspec's `cat_ranges`: it parallelizes every filesystem alike (a local
disk, s3fs, gcsfs; `cat_ranges` is concurrent only on async ones), each range keeps the
reader's own retry, backoff and one-line errors, and the fetches run while the loader
decodes and collates, where `cat_ranges` blocks its caller until every range is in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from litforge.data.shards.faults import DamagedShards
from litforge.data.shards.order import BlockOrder, Plan, Planned

Place = tuple[int, int]  # (group, place in the group's block order)


class RangeSource(Protocol):
    """What the read-ahead asks of a dataset of files cut into blocks (litforge's shards,
    WebDataset tars)."""

    counts: list[int]  # samples per file

    @property
    def fs(self) -> Any: ...

    @property
    def index(self) -> Any: ...  # .samples_per_block

    def learn_spans(self, files: list[int], pool: ThreadPoolExecutor) -> None:
        """Make the blocks' byte ranges of `files` known (a shard's header read) on `pool`;
        a file that fails is left for its first read to say so."""

    def span(self, file: int, block: int) -> tuple[int, int] | None:
        """The block's byte range; None: not known (the block is read alone)."""

    def cached(self, file: int, block: int) -> bool: ...

    def fetch_run(self, file: int, first: int, last: int) -> dict[int, bytes | DamagedShards]:
        """Blocks `first`..`last` of `file` in one range read, each checked (a damaged one
        as its one-line error, raised when it is taken) and written to the disk cache."""


@dataclass
class _Slot:
    """A block fetched or on its way: where the order reads it, its bytes, its range."""

    at: Place
    size: int
    future: Future[dict[int, bytes | DamagedShards]]


class ReadAhead:
    """The next blocks of `data`'s order, `budget` bytes ahead, on `threads` threads."""

    def __init__(self, data: RangeSource, budget: int, threads: int) -> None:
        self.data, self.budget = data, budget
        # A refill (half the budget) splits into ranges for every thread, yet none smaller
        # than a MiB: fewer requests count for more than more of them at once.
        self.max_range = max(1 << 20, budget // (2 * threads))
        data.fs  # noqa: B018 - opened here, not by two pool threads at once
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="litforge-readahead")
        self.plan: Plan | None = None
        self.order: BlockOrder | None = None
        self.at: Place = (0, 0)  # the window the reader stands in
        self.frontier: Place = (-1, 0)  # the last place taken into the horizon
        self._next: Iterator[tuple[Place, tuple[int, int]]] = iter(())
        self._peeked: tuple[Place, tuple[int, int]] | None = None
        self.slots: dict[tuple[int, int], _Slot] = {}
        self.held = 0  # bytes of the slots: fetched or on their way, not yet taken
        self.peak = 0  # the most bytes held at once (tests check the bound)
        self.ranges = 0  # range requests made

    def take(self, plan: Plan, index: int, shard: int, block: int) -> bytes | None:
        """Block `block` of `shard`'s checked bytes, for sample `index` drawn in `plan`;
        None when it is not read ahead (in the disk cache, or its shard's header damaged):
        the reader then reads it as it would alone."""
        if plan != self.plan:  # a new epoch, or a mixture stream's next permutation
            self.plan = plan
            self.order = plan.order(self.data.counts, self.data.index.samples_per_block)
            self.frontier = (-1, 0)  # nothing of it read ahead yet: restarts below
        assert self.order is not None
        at = self.order.window_of(index)
        if at < self.at or at > self.frontier:  # a new plan, or a jump (a resume)
            self._restart(at)
        elif at > self.at:
            self.at = at
            for key in [k for k, slot in self.slots.items() if slot.at < at]:  # passed
                self._drop(key)
        self._fill()
        slot = self.slots.pop((shard, block), None)
        if slot is None:
            return None
        self.held -= slot.size
        got = slot.future.result().pop(block)  # the range's error, if it failed, raises here
        if isinstance(got, DamagedShards):
            raise got
        return got

    def _restart(self, at: Place) -> None:
        for key in list(self.slots):
            self._drop(key)
        assert self.order is not None
        self.at, self.frontier, self._peeked = at, at, None
        self._next = self.order.ahead(*at)

    def _drop(self, key: tuple[int, int]) -> None:
        slot = self.slots.pop(key)
        self.held -= slot.size
        slot.future.cancel()  # not begun: not fetched (begun: its bytes are let go)

    def _fill(self) -> None:
        """Take the order's next blocks into the horizon while their bytes fit, and fetch
        them as ranges; only once half the budget is free (long runs, few requests)."""
        if self.held > self.budget // 2:
            return
        horizon: dict[int, list[tuple[int, Place, int]]] = {}  # shard -> (block, at, bytes)
        room = self.budget - self.held
        seen_groups: set[int] = set()
        while True:
            if self._peeked is None:
                self._peeked = next(self._next, None)
                if self._peeked is None:
                    break
            at, (shard, block) = self._peeked
            if at[0] not in seen_groups:  # a group's headers, in parallel, once
                seen_groups.add(at[0])
                assert self.order is not None
                self.data.learn_spans(self.order.groups[at[0]], self.pool)
            span = self.data.span(shard, block)
            key = (shard, block)
            if span is None or key in self.slots or self.data.cached(shard, block):
                self._peeked, self.frontier = None, at  # read alone, or already here
                continue
            size = span[1] - span[0]
            if size > room and (horizon or self.held):  # at most one block past the budget
                break
            room -= size
            horizon.setdefault(shard, []).append((block, at, size))
            self._peeked, self.frontier = None, at
        runs = []
        for shard, blocks in horizon.items():
            blocks.sort()
            run: list[tuple[int, Place, int]] = []
            for entry in blocks:
                if run and (entry[0] != run[-1][0] + 1 or
                            sum(b[2] for b in run) + entry[2] > self.max_range):  # fmt: skip
                    runs.append((shard, run))
                    run = []
                run.append(entry)
            runs.append((shard, run))
        for shard, run in sorted(runs, key=lambda r: min(b[1] for b in r[1])):  # urgent first
            future = self.pool.submit(self.data.fetch_run, shard, run[0][0], run[-1][0])
            self.ranges += 1
            for block, at, size in run:
                self.slots[(shard, block)] = _Slot(at, size, future)
                self.held += size
        self.peak = max(self.peak, self.held)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class ReadsAhead:
    """A dataset's read-ahead, made in the process that reads (the main one, or each
    DataLoader worker: a pickled dataset carries none) on its first planned index."""

    readahead_bytes = 0  # 0: none, each block is its own request
    read_threads = 1
    _ahead: ReadAhead | None = None
    _ahead_pid = 0

    def _read_ahead(self, file: int, block: int, index: int | None) -> bytes | None:
        """The block from the read-ahead, when `index` came with its order's plan."""
        if not isinstance(index, Planned) or self.readahead_bytes <= 0:
            return None
        if self._ahead is None or self._ahead_pid != os.getpid():  # one per process
            self._ahead = ReadAhead(self, self.readahead_bytes, self.read_threads)  # type: ignore[arg-type]
            self._ahead_pid = os.getpid()
        return self._ahead.take(index.plan, index, file, block)


def split_run(raw: bytes, start: int, blocks: range, span: Callable[[int], tuple[int, int]],
              damage: Callable[[int, bytes], DamagedShards | None], key: Callable[[int], str],
              cache: Any) -> dict[int, bytes | DamagedShards]:  # fmt: skip
    """A run's bytes (from byte `start` of its file) cut into its `blocks`: each one's
    bytes, or what `damage` finds wrong with them (raised when that block is taken); the
    sound ones written to `cache` (a `BlockCache`, or None) at once."""
    view = memoryview(raw)
    out: dict[int, bytes | DamagedShards] = {}
    good = []
    for block in blocks:
        a, b = span(block)
        piece = bytes(view[a - start : b - start])
        fault = damage(block, piece)
        out[block] = piece if fault is None else fault
        if fault is None:
            good.append((key(block), piece))
    if cache is not None:
        cache.put_many(good)
    return out
