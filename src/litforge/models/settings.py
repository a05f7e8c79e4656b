"""model.freeze: litforge's one key in the user's model group (litforge.models.freeze)."""

from __future__ import annotations

from dataclasses import dataclass

from litforge.settings import Settings, key
from litforge.settings.rules import ListOf, Text


@dataclass(frozen=True)
class FreezeSettings(Settings):
    """Parameters kept fixed during training, by name."""

    GROUP = "model"
    TITLE = "model.freeze"
    GROUP_FILE = "litforge/settings.yaml"

    freeze: list[str] | None = key(
        None,
        ListOf(Text(), null=True),
        "parameter name patterns to freeze, e.g. '[net.features.*]' (litforge's key, not the module's)",
    )
