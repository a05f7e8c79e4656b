"""How a streamed reader talks to its store: one attempt per request in the store's client
(the reader retries with its own backoff), and what it advises when training waits on it.
Shared by litforge's shards and the other formats (litforge.data.formats)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from litforge.data.shards.faults import DataStoreUnreachable
from litforge.errors import STORE_ADVICE, redact_url


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


def retried(fn: Callable[[], Any], what: str, url: str, retries: int, backoff_s: float,
            before_training: bool = False, passes: tuple[type[BaseException], ...] = (),
            damage: Callable[[Exception], Exception | None] | None = None) -> Any:  # fmt: skip
    """`fn()`, retried with exponential backoff on a store error; after the last attempt
    (or at once, when the store refuses the credentials) one line, `DataStoreUnreachable`,
    that says whether a checkpoint can be resumed from (`before_training`: none yet).
    A missing file and the exceptions in `passes` are not outages: raised at once; so is
    what `damage(err)` turns an error into (a range past a file's end)."""
    resume = "" if before_training else "; the same command resumes from the last checkpoint"
    for attempt in range(retries + 1):
        try:
            return fn()
        except (FileNotFoundError, *passes):
            raise  # retrying reads the same bytes
        except Exception as err:  # noqa: BLE001 - a store's errors have no common type
            if damage is not None and (instead := damage(err)) is not None:
                raise instead from None
            refused = isinstance(err, PermissionError) or "credentials" in str(err).lower()
            if attempt == retries or refused:  # a refusal does not pass with waiting
                first = str(err).splitlines()[0] if str(err) else ""
                raise DataStoreUnreachable(
                    f"data.url={redact_url(url)}: {what} failed {attempt + 1} time(s) "
                    f"({type(err).__name__}: {first}){resume}. " + STORE_ADVICE
                ) from None
            time.sleep(backoff_s * 2**attempt)
    raise AssertionError("unreachable")
