"""What the streaming machinery (the order, the samplers, mixtures, the sample-id audit and
the changed-data check) reads of a streamed dataset, whatever its format: `ShardedDataset`
(litforge's shards) has it, and so do the Parquet and WebDataset readers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class Part(Protocol):
    """One file of a dataset: its name beside the others and its sample count."""

    @property
    def name(self) -> str: ...

    @property
    def samples(self) -> int: ...


class Layout(Protocol):
    """How a dataset's samples lie: its files in order, and the samples of a block (each
    file's block b holds its samples [b * samples_per_block, (b + 1) * samples_per_block))."""

    @property
    def shards(self) -> Sequence[Part]: ...

    @property
    def samples_per_block(self) -> int: ...

    @property
    def extra(self) -> dict[str, Any]: ...


@runtime_checkable
class StreamSource(Protocol):
    """A map-style dataset of files of blocks at `url`, read block by block.

    `counts`: samples per file, in order; `fingerprint`: a digest of what the data is, as
    read (a resume compares it); `locate(i)`: sample i's file URL and place in that file
    (the audit's id); `stall_advice()`: the knobs that make reading it faster."""

    url: str
    fingerprint: str
    counts: list[int]

    @property
    def index(self) -> Layout: ...

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...

    def locate(self, index: int) -> tuple[str, int]: ...

    def stall_advice(self) -> str: ...


@dataclass(frozen=True)
class FilePart:
    name: str
    samples: int


@dataclass(frozen=True)
class FileLayout:
    """A `Layout` built by a reader from the files it found (no index.json of litforge's)."""

    shards: list[FilePart]
    samples_per_block: int
    extra: dict[str, Any] = field(default_factory=dict)
