"""processes.*: how a run's processes start and meet (litforge.launch.processes, ddp, fsdp)."""

from __future__ import annotations

from dataclasses import dataclass

from litforge.settings import Settings, key
from litforge.settings.rules import Bool, Num


@dataclass(frozen=True)
class ProcessSettings(Settings):
    """How a run's processes start and meet."""

    GROUP = "processes"
    TITLE = "processes"
    GROUP_FILE = "litforge/settings.yaml"

    rendezvous_timeout_s: float = key(
        600,
        Num(0.0, open_lo=True),
        "DDP: give up when not all processes (and nodes) have met by then",
    )
    collective_timeout_s: float = key(
        1800,
        Num(0.0, open_lo=True),
        "DDP: a rank waiting this long on the others (one hung) ends the run",
    )
    oversubscribe: bool = key(
        False, Bool(), "true: allow more CPU processes (trainer.devices) than cores"
    )
