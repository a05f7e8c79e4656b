"""callbacks.numerics.*: the numerics watch's keyword arguments, their defaults and rules
(litforge.monitors.numerics.callback.NumericsWatch takes its defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass

from litforge.settings import Settings, key
from litforge.settings.rules import Bool, Int, Num, OneOf

POLICIES = ("warn", "skip", "stop")


@dataclass(frozen=True)
class NumericsSettings(Settings):
    """Watches each optimizer step for a non-finite loss or gradient and reports the first in
    one block: the step, the precision (16-mixed: loss scale, steps the GradScaler skipped),
    the first parameter whose gradient is non-finite, and what to try. Logs numerics/grad_norm
    (before clipping); 16-mixed on a GPU also numerics/loss_scale and numerics/skipped_steps.
    In 16-mixed a step the GradScaler skips on overflow is normal; the faults there are a
    non-finite loss and the two limits below."""

    GROUP = "callbacks.numerics"
    TITLE = "callbacks.numerics"
    GROUP_FILE = "callbacks/numerics.yaml"
    NODE = "numerics"
    TARGET = "litforge.monitors.numerics.callback.NumericsWatch"

    policy: str = key(
        "stop",
        OneOf(POLICIES),
        "warn: report and train on | skip: drop that optimizer step (weights unchanged, the LR schedule still advances) | stop: skip it, save a checkpoint, exit with status 65; the same command resumes. skip and stop read one value per optimizer step before the step: on a GPU one host-device sync a step, except in 16-mixed (the GradScaler syncs anyway, and the watch reads each step's values a step later without waiting). warn never waits.",
        error="{key}={value!r} is not one of: " + ", ".join(POLICIES),
    )
    max_skipped_in_row: int = key(
        20,
        Int(1),
        "16-mixed: this many steps in a row skipped by the GradScaler is a fault",
        error="{key}={value!r} {reason}",
    )
    min_loss_scale: float = key(
        1.0,
        Num(0.0),
        "16-mixed: a loss scale below this is a fault (0: never)",
        error="{key}={value!r} {reason} (0: never)",
    )
    activations: bool = key(
        False,
        Bool(),
        "true: hook every module, print its largest |activation| / 65504 at the end",
        error="{key}={value!r} {reason}",
    )
