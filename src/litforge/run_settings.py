"""The run's own top-level keys: its name, seed, what it optimizes, where it starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litforge.settings import Settings, key
from litforge.settings.rules import Bool, Either, Int, ListOf, OneOf, Text

# At most 200 characters: a file name (checkpoint.dir/NAME-<job>/..., NAME.log) has 255.
SAFE_NAME = Text(r"(?!\.{1,2}$)[A-Za-z0-9][A-Za-z0-9._=,+-]{0,199}", "a name of up to 200 letters, digits and ._=,+- (no / or ..)", null=True)  # fmt: skip


@dataclass(frozen=True)
class RunSettings(Settings):
    """The run: what it is called, its seed, what it optimizes, what it prints."""

    TITLE = "run"
    GROUP_FILE = "litforge/settings.yaml"

    task_name: str = key(
        "train", Text(), "the run's kind: train or eval (names its outputs/ folder)"
    )
    seed: int = key(42, Int(0, 2**32 - 1), "seeds torch, numpy, python and dataloader workers")
    run_dir: str = key(
        "${hydra:runtime.output_dir}", Text(), "where everything of this run is written"
    )
    run_name: str | None = key(
        None, SAFE_NAME, "a stable name: re-running the same command resumes this run"
    )
    test: bool = key(True, Bool(), "evaluate the best checkpoint on the test split after fit")
    print_config: bool = key(
        False,
        Bool(),
        "true: print the resolved config at the start (it is always in RUN_DIR/config.yaml)",
    )
    optimized_metric: Any = key(
        "val/loss",
        Either((Text(), ListOf(Text())), null=True),
        "what a sweep (-m) optimizes and checkpoints are ranked by (a list: multi-objective)",
    )
    optimized_mode: str = key(
        "${litforge.sweep_mode:min}",
        OneOf(("min", "max")),
        "min for a loss, max for an accuracy; unset: a sweep's hydra.sweeper.direction, else min",
    )


@dataclass(frozen=True)
class ResumeSettings(Settings):
    """Where a run starts: its own newest checkpoint, a given one, or fresh."""

    TITLE = "resume"
    GROUP_FILE = "litforge/settings.yaml"

    resume: str = key(
        "auto",
        OneOf(("auto", "never")),
        "auto: continue from the newest complete checkpoint | never",
    )
    resume_shape: str = key(
        "adapt",
        OneOf(("adapt", "strict")),
        "resuming on another number of processes or micro-batch: adapt keeps the effective batch (accumulation) | strict refuses",
    )
    ckpt_path: str | None = key(
        None, Text(null=True), "resume from this checkpoint file or URL instead"
    )
