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

import contextlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from litforge.data.shards import format as fmt
from litforge.data.shards.faults import DamagedShards, DataStoreUnreachable
from litforge.data.shards.order import BlockOrder, Plan

if TYPE_CHECKING:
    from litforge.data.shards.reader import ShardedDataset

Place = tuple[int, int]  # (group, place in the group's block order)


@dataclass
class _Slot:
    """A block fetched or on its way: where the order reads it, its bytes, its range."""

    at: Place
    size: int
    future: Future[dict[int, bytes | DamagedShards]]


class ReadAhead:
    """The next blocks of `data`'s order, `budget` bytes ahead, on `threads` threads."""

    def __init__(self, data: ShardedDataset, budget: int, threads: int) -> None:
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
                self._headers(at[0])
            header = self.data._headers.get(shard)
            key = (shard, block)
            if header is None or key in self.slots or self.data._cached(shard, block):
                self._peeked, self.frontier = None, at  # read alone, or already here
                continue
            size = header[0][block + 1] - header[0][block]
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
            future = self.pool.submit(self._fetch, shard, run[0][0], run[-1][0])
            self.ranges += 1
            for block, at, size in run:
                self.slots[(shard, block)] = _Slot(at, size, future)
                self.held += size
        self.peak = max(self.peak, self.held)

    def _headers(self, group: int) -> None:
        """Load the headers of `group`'s shards at once; one that fails is left to the
        reader, which then raises its error at that shard's first read, as without this."""

        def load(shard: int) -> None:
            # A header that does not read is said by the read that needs it, not here.
            with contextlib.suppress(DamagedShards, DataStoreUnreachable):
                self.data._header(shard)

        assert self.order is not None
        data, missing = (
            self.data,
            [s for s in self.order.groups[group] if s not in self.data._headers],
        )
        cached = [
            s for s in missing if data._cache is not None and data._cache.has(data._header_key(s))
        ]
        for shard in cached:  # a warm cache: no thread started (it cost more than the read)
            load(shard)
        list(self.pool.map(load, [s for s in missing if s not in cached]))

    def _fetch(self, shard: int, first: int, last: int) -> dict[int, bytes | DamagedShards]:
        """Blocks `first`..`last` of `shard` in one range, each checked (a damaged one is
        its one-line error, raised when it is taken) and cached."""
        data = self.data
        name = data.index.shards[shard].name
        offsets, digests = data._headers[shard]
        start = offsets[first]
        raw = memoryview(data._shard_bytes(shard, start, offsets[last + 1]))
        out: dict[int, Any] = {}
        good = []
        for block in range(first, last + 1):
            piece = bytes(raw[offsets[block] - start : offsets[block + 1] - start])
            try:
                fmt.check_block(piece, block, offsets[block], offsets[block + 1], digests[block])
            except fmt.Damaged as err:
                out[block] = data._damaged(name, str(err))
                continue
            out[block] = piece
            good.append((data._block_key(shard, block), piece))
        if data._cache is not None:
            data._cache.put_many(good)
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
