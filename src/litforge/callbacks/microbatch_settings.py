"""microbatch.*: splitting a batch that ran out of memory (callbacks.auto_microbatch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litforge.errors import ConfigError
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

    @classmethod
    def check_across(cls, plain: dict[str, Any]) -> None:
        """microbatch.auto is carried out by callbacks.auto_microbatch: on while the config
        dropped that callback (callbacks=none), it would do nothing."""
        node = plain.get("microbatch")
        callbacks = plain.get("callbacks") or {}
        if isinstance(node, dict) and node.get("auto") and callbacks.get("auto_microbatch") is None:
            raise ConfigError(
                "microbatch.auto=true is carried out by callbacks.auto_microbatch, which this "
                "config dropped; list it with those you keep, e.g. 'callbacks=[auto_microbatch]'"
            )
