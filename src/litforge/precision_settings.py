"""precision.*: the settings each `precision=` option gives (GradScaler, matmul, eps).

Their values belong to the option picked (conf/precision/*.yaml): the defaults here are
those of the default option, precision=32, and of 16-mixed for the GradScaler's keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from litforge.settings import Settings, key
from litforge.settings.rules import Int, Num, OneOf


@dataclass(frozen=True)
class PrecisionSettings(Settings):
    """What a precision= option sets beside trainer.precision."""

    GROUP = "precision"
    TITLE = "precision"
    GROUP_FILE = None  # each option's file holds its own values

    optimizer_eps: float = key(
        1.0e-8,
        Num(0.0, open_lo=True),
        "the eps litforge's model configs give their optimizer (eps: ${precision.optimizer_eps}); 1e-4 in the true-half modes",
    )
    matmul: str = key(
        "highest",
        OneOf(("highest", "high", "medium")),
        "torch.set_float32_matmul_precision for the matmuls left in float32 (high: TF32 on Ampere+)",
    )
    init_scale: float = key(
        65536.0, Num(0.0, open_lo=True), "16-mixed: the GradScaler's first scale (2^16)"
    )
    growth_factor: float = key(
        2.0,
        Num(1.0, open_lo=True),
        "16-mixed: scale x this after growth_interval steps in a row without overflow",
    )
    backoff_factor: float = key(
        0.5,
        Num(0.0, 1.0, open_lo=True, open_hi=True),
        "16-mixed: scale x this after a step that overflowed",
    )
    growth_interval: int = key(
        2000, Int(1), "16-mixed: steps without overflow before the scale grows"
    )
