"""What the read-ahead (`readahead.RangeSource`) asks of litforge's shards: each block's
byte range from its shard's header, and a run of blocks fetched as one range, each block
checked against its digest and cached on arrival."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from litforge.data.shards import format as fmt
from litforge.data.shards.faults import DamagedShards, DataStoreUnreachable
from litforge.data.shards.readahead import split_run

if TYPE_CHECKING:
    from litforge.data.shards.cache import BlockCache


class ShardRanges:
    """Mixed into `ShardedDataset`, whose header reads (`_header`, `_header_key`), cache
    keys (`_block_key`), range reads (`_shard_bytes`) and damage lines (`_damaged`) these
    use."""

    _headers: dict[int, tuple[list[int], list[bytes]]]
    _cache: BlockCache | None
    index: Any

    def learn_spans(self, files: list[int], pool: ThreadPoolExecutor) -> None:
        def load(shard: int) -> None:
            # A header that does not read is said by the read that needs it, not here.
            with contextlib.suppress(DamagedShards, DataStoreUnreachable):
                self._header(shard)

        missing = [s for s in files if s not in self._headers]
        cache = self._cache
        cached = [s for s in missing if cache is not None and cache.has(self._header_key(s))]
        for shard in cached:  # a warm cache: no thread started (it cost more than the read)
            load(shard)
        list(pool.map(load, [s for s in missing if s not in cached]))

    def span(self, file: int, block: int) -> tuple[int, int] | None:
        header = self._headers.get(file)
        return None if header is None else (header[0][block], header[0][block + 1])

    def cached(self, file: int, block: int) -> bool:
        return self._cache is not None and self._cache.has(self._block_key(file, block))

    def fetch_run(self, file: int, first: int, last: int) -> dict[int, bytes | DamagedShards]:
        name = self.index.shards[file].name
        offsets, digests = self._headers[file]

        def damage(block: int, piece: bytes) -> DamagedShards | None:
            try:
                fmt.check_block(piece, block, offsets[block], offsets[block + 1], digests[block])
            except fmt.Damaged as err:
                return self._damaged(name, str(err))
            return None

        raw = self._shard_bytes(file, offsets[first], offsets[last + 1])
        return split_run(raw, offsets[first], range(first, last + 1),
                         lambda b: (offsets[b], offsets[b + 1]), damage,
                         lambda b: self._block_key(file, b), self._cache)  # fmt: skip
