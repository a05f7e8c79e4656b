"""Between the device pool and a sweep that asks and tells (litforge's Optuna sweep): where
trial-by-trial jobs come from. Imports nothing heavy: the sweep process loads it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hydra.core.utils import JobReturn

LATER = "later"  # a feed's answer: no job now, ask again


class Feed(Protocol):
    """Where trial-by-trial jobs come from (litforge's Optuna sweep: ask and tell)."""

    def ask(self) -> tuple[int, list[str]] | str | None:
        """The next job's (number, overrides); LATER: none now, ask again; None: no more."""

    def told(self, idx: int, result: JobReturn) -> None:
        """Job `idx` ended with `result`."""
