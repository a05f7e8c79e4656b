"""What training data a checkpoint was reading, and what changed since.

A resumed run continues at a saved position in the order of the training shards: onto
shards rewritten, re-sharded or grown since, that position means other samples (some
trained twice, some never), and nothing would say so. So the checkpoint records each
training stream's index (the sha256 of its index.json bytes, or for Parquet and WebDataset
of their own index: `litforge.data.formats`; its sample count and file list: `record`),
and a resume compares it with the data it finds (`changes`) before the first step: a
change stops the run in one line, unless `data.accept_changed_data=true` lets the run
continue at the next epoch's start with a fresh order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from litforge.data.formats.source import StreamSource
from litforge.errors import redact_url


def record(streams: Sequence[tuple[str, StreamSource]]) -> list[dict[str, Any]]:
    """Each training stream's (config key, data) as plain values (weights_only loads
    them); URLs with their credentials cut."""
    return [
        {
            "key": key,
            "url": redact_url(data.url),
            "fingerprint": data.fingerprint,
            "samples": len(data),
            "shards": [[shard.name, shard.samples] for shard in data.index.shards],
        }
        for key, data in streams
    ]


def _what(saved: dict[str, Any], now: dict[str, Any]) -> str | None:
    """How one stream's data differs from the saved record; None: it does not."""
    if saved.get("fingerprint") == now["fingerprint"]:
        return None
    old, new = saved.get("samples"), now["samples"]
    if old != new:
        return f"it held {old} samples, now {new}"
    shards = saved.get("shards") or []
    if [list(s) for s in shards] != now["shards"]:
        return (
            f"its {new} samples are now in {len(now['shards'])} shard(s), not {len(shards)} "
            "(re-sharded: the saved position points at other samples)"
        )
    return f"its index.json was rewritten (still {new} samples in the same shards, other bytes)"


def changes(saved: Any, now: list[dict[str, Any]]) -> list[str]:
    """One phrase per training stream that is not what the checkpoint was reading."""
    if not isinstance(saved, list) or not all(isinstance(s, dict) for s in saved):
        return []  # no record (a checkpoint from before it): nothing to compare with
    if len(saved) != len(now):
        return [
            f"data: the checkpoint was reading {len(saved)} training stream(s) "
            f"{[s.get('url') for s in saved]}, this run reads {len(now)} "
            f"{[n['url'] for n in now]}"
        ]
    found = []
    for old, new in zip(saved, now, strict=True):
        if (what := _what(old, new)) is None:
            continue  # the same index bytes, wherever they moved: the same data
        moved = f" (the checkpoint read {old.get('url')})" if old.get("url") != new["url"] else ""
        found.append(f"{new['key']}={new['url']}{moved} is not the data the checkpoint was "
                     f"reading: {what}")  # fmt: skip
    return found


def refusal(found: list[str]) -> str:
    return (
        "; ".join(found) + ". Resuming would read other samples at the saved position: point "
        "the data back at what the run was reading, pass resume=never to start afresh, or set "
        "data.accept_changed_data=true to continue at the next epoch's start with a fresh "
        "order (the rest of the interrupted epoch is not trained)"
    )


def accepted(found: list[str]) -> str:
    return (
        "; ".join(found) + ". data.accept_changed_data=true: the interrupted epoch ends "
        "here; training continues at the next epoch's start, in a fresh order of the new data"
    )
