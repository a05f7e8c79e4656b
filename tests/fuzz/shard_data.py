"""A small real sharded dataset, and the one check every damaged copy of it must pass: read
every sample; either all equal the originals, or one line names the damaged file."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from litforge.data.shards.reader import ShardedDataset
from litforge.data.shards.writer import write_shards
from litforge.errors import ConfigError

SAMPLES, PER_SHARD, PER_BLOCK = 60, 24, 8  # shards of 24, 24, 12 samples; blocks of 8
CASE_TIMEOUT_S = 10.0  # a hang fails the case; reading 60 samples takes milliseconds


def sample(i: int) -> tuple[torch.Tensor, int, str]:
    """Sample i: most blocks as columns, shard 0's second block torch.save'd (its tensors'
    lengths differ), so both ways a block is stored meet the damage."""
    length = 1 + i % 3 if 8 <= i < 16 else 3
    return torch.full((length,), float(i)), i, f"s{i}"


def write(url: str) -> list[Any]:
    """Write the dataset at `url`; its samples, as written."""
    data = [sample(i) for i in range(SAMPLES)]
    write_shards(data, url, samples_per_shard=PER_SHARD, samples_per_block=PER_BLOCK)
    return data


def same(got: Any, want: Any) -> bool:
    return (
        isinstance(got, tuple) and len(got) == 3 and isinstance(got[0], torch.Tensor)
        and got[0].dtype == want[0].dtype and torch.equal(got[0], want[0])
        and type(got[1]) is int and got[1] == want[1] and got[2] == want[2]
    )  # fmt: skip


def read_all(url: str, **options: Any) -> list[Any]:
    """Every sample of the dataset at `url`, through a fresh reader (no retries: the local
    files and the loopback store do not fail by themselves)."""
    data = ShardedDataset(url, retries=0, **options)
    return [data[i] for i in range(len(data))]


def outcome(url: str, read: Callable[..., list[Any]] = read_all, **options: Any) -> tuple[str, Any]:
    """('samples', [...]) or ('error', exception), reading with `read` in a thread: a hang
    is a failure, not a stuck suite."""
    result: list[tuple[str, Any]] = []

    def run() -> None:
        try:
            result.append(("samples", read(url, **options)))
        except BaseException as err:  # noqa: BLE001 - the test judges every outcome
            result.append(("error", err))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(CASE_TIMEOUT_S)
    assert result, f"reading {url} hung for {CASE_TIMEOUT_S} s"
    return result[0]


def check(label: str, url: str, names: list[str], original: list[Any], **options: Any) -> str:
    """Assert the dataset at `url` reads as `original`, or fails with one ConfigError line
    naming one of `names` (file URLs); return which it was, for the tally."""
    kind, got = outcome(url, **options)
    if kind == "samples":
        assert len(got) == len(original), f"{label}: {len(got)} samples, not {len(original)}"
        wrong = [i for i, (g, w) in enumerate(zip(got, original, strict=True)) if not same(g, w)]
        assert not wrong, f"{label}: samples {wrong[:5]} differ from those written"
        return "read"
    assert isinstance(got, ConfigError), f"{label}: {type(got).__name__}: {got}"
    message = str(got)
    assert "\n" not in message, f"{label}: more than one line: {message!r}"
    assert any(name in message for name in names), f"{label}: names no file: {message}"
    return "refused"
