"""How a streamed reader talks to its store: one attempt per request in the store's client
(the reader retries with its own backoff), and what it advises when training waits on it.
Shared by litforge's shards and the other formats (litforge.data.formats)."""

from __future__ import annotations

from typing import Any


def one_try(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """On S3, one attempt per read in botocore (unless the options say otherwise):
    the reader retries with its own backoff, and a dead endpoint is one line in seconds,
    not after both libraries' retries (measured: 27 s for a refused port)."""
    if not url.startswith(("s3://", "s3a://")):
        return options
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("retries", {"max_attempts": 1})
    config.setdefault("connect_timeout", 10)
    return {**options, "config_kwargs": config}


def stall_advice(where: str, cache_dir: str | None, per_block: int) -> str:
    cache = (
        f"data.cache_dir={cache_dir} holds too little? raise data.cache_bytes"
        if cache_dir
        else "data.cache_dir=/local/disk (with data.cache_bytes) keeps fetched blocks for the "
        "next epochs and a restart"
    )
    return (
        f"The data is streamed from {where}: data.num_workers=N fetches blocks in parallel "
        f"and data.prefetch_factor=K reads K batches ahead per worker; {cache}; fewer, larger "
        f"reads: litforge shards write --samples-per-block (now {per_block})"
    )
