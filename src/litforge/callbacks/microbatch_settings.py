"""microbatch.*: splitting a batch that ran out of memory (callbacks.auto_microbatch)."""

from __future__ import annotations

from dataclasses import dataclass

from litforge.settings import Settings, key
from litforge.settings.rules import Bool


@dataclass(frozen=True)
class MicrobatchSettings(Settings):
    """An out-of-memory step's way out: a smaller micro-batch, the same effective batch."""

    GROUP = "microbatch"
    TITLE = "microbatch"
    GROUP_FILE = "litforge/settings.yaml"

    auto: bool = key(
        False,
        Bool(),
        "true: an out-of-memory step splits each batch in two (again if needed): micro-batch /2, accumulation x2, same effective batch and data order; one process",
    )
