"""precision_ab.*: the precision A/B experiment's keys (conf/experiment/precision_ab.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litforge.settings import Settings, key
from litforge.settings.rules import Either, Int, ListOf, Num, OneOf


@dataclass(frozen=True)
class PrecisionABSettings(Settings):
    """Is reduced precision safe for training this model? experiment=precision_ab."""

    GROUP = "precision_ab"
    TITLE = "precision_ab (experiment=precision_ab)"
    GROUP_FILE = None  # the experiment's file (the project's) gives them

    compare: Any = key(
        "auto",
        Either(
            (
                OneOf(("auto",)),
                ListOf(
                    OneOf(("bf16-mixed", "16-mixed", "bf16-true", "16-true", "fp8", "fp8-rowwise"))
                ),  # fmt: skip
            )
        ),
        "compared with float32: auto (what this machine runs: bf16-mixed, fp8 where torchao is "
        "installed and the card has FP8, 16-mixed on a GPU) or a list, e.g. [16-mixed]",
    )
    threshold: float = key(
        0.05,
        Num(0.0, open_lo=True),
        "a precision tracks float32 while its relative loss gap stays <= this",
    )
    smooth_steps: int = key(
        10, Int(1), "both losses are averaged over the last N steps before the gap is taken"
    )
