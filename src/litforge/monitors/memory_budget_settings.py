"""callbacks.memory_budget.*: the memory budget's keyword arguments, their defaults and
rules (litforge.monitors.memory_budget.MemoryBudget takes its defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litforge.errors import ConfigError
from litforge.planning.hardware import parse_memory
from litforge.settings import Settings, key
from litforge.settings.rules import Bool, Int, Rule


@dataclass
class MemorySize(Rule):
    """What litforge.planning.hardware.parse_memory reads: a size or a card name."""

    null: bool = False

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        try:
            parse_memory(str(value))
        except ConfigError:
            return False
        return True

    def text(self) -> str:
        return "a size such as 80GiB, 24GB or a number of bytes, or a card name such as H100"


@dataclass(frozen=True)
class MemoryBudgetSettings(Settings):
    """Memory of this run (weights, gradients, optimizer state, activations) at fit start, as
    `python -m litforge.budget` prints it; stops before training when it cannot fit."""

    GROUP = "callbacks.memory_budget"
    TITLE = "callbacks.memory_budget"
    GROUP_FILE = "callbacks/memory_budget.yaml"
    NODE = "memory_budget"
    TARGET = "litforge.monitors.memory_budget.MemoryBudget"

    device_memory: str | int | None = key(
        None,
        MemorySize(null=True),
        "the memory to fit in: 80GiB, 24GB or a card (H100); null: the GPU's own, none on CPU",
    )
    enforce: bool = key(
        True, Bool(), "stop before training when the estimate exceeds it; false: warn and train"
    )
    compare_after_steps: int = key(
        3,
        Int(1),
        "GPU: after this many optimizer steps, log the estimate next to the measured peak",
    )
    # The run's own setting: processes.oversubscribe also lets trainer.devices exceed the cores.
    oversubscribe: bool = key(
        "${processes.oversubscribe}",
        Bool(),
        "CPU: N processes x the estimate over the free RAM stops the run unless true",
    )
    snapshot: bool = key(
        False,
        Bool(),
        "CUDA: record allocations; an out-of-memory error writes run_dir/memory_snapshot.pickle (pytorch.org/memory_viz)",
    )
