"""precision.*: the settings each `precision=` option gives (GradScaler, matmul, eps).

Their values belong to the option picked (conf/precision/*.yaml): the defaults here are
those of the default option, precision=32, and of 16-mixed for the GradScaler's keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litforge.errors import ConfigError
from litforge.settings import Settings, key
from litforge.settings.rules import Int, ListOf, Num, OneOf, Text

FP8_RECIPES = ("off", "tensorwise", "rowwise")


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
    fp8: str = key(
        "off",
        OneOf(FP8_RECIPES),
        "torchao float8 training of the Linear layers, under bf16 autocast: tensorwise "
        "(precision=fp8) or rowwise scales (precision=fp8-rowwise); off elsewhere",
    )
    fp8_min_dim: int = key(
        2048,
        Int(16),
        "fp8: a Linear layer whose smaller dimension is under this stays bf16 (casting costs "
        "more than the faster matmul saves); dimensions not multiples of 16 always do",
    )
    fp8_skip: list[str] | None = key(
        None,
        ListOf(Text(), null=True),
        "fp8: Linear layers whose name contains one of these stay bf16, e.g. [lm_head]",
    )

    @classmethod
    def check_across(cls, plain: dict[str, Any]) -> None:
        """fp8 runs its float8 matmuls inside bfloat16 autocast: trainer.precision=bf16-mixed."""
        fp8 = (plain.get("precision") or {}).get("fp8")  # absent: off, the schema's default
        trainer = (plain.get("trainer") or {}).get("precision")
        if fp8 in FP8_RECIPES[1:] and str(trainer) != "bf16-mixed":
            raise ConfigError(
                f"precision.fp8={fp8} needs trainer.precision=bf16-mixed (float8 matmuls "
                f"inside bfloat16 autocast), not {trainer}; pick precision=fp8 or "
                "precision=fp8-rowwise, which set both"
            )
