"""How far a precision's loss curve is from float32's, and the verdict on it.

Pure functions on lists of numbers (no files, no plots), so they can be tested on made-up
curves. Used by `litforge.precision_checks.training_ab.experiment`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Gap:
    """The relative gap of one precision's smoothed loss to float32's, step by step.

    steps/gap: the steps both runs logged and |mean_p - mean_32| / |mean_32| at each, where
    mean_x is the loss averaged over the last `window` steps (inf where a loss is not
    finite). exceeded_at: the first step whose gap is above the threshold, else None.
    """

    steps: list[int]
    gap: list[float]
    threshold: float
    exceeded_at: int | None
    reference_broken_at: int | None  # first step float32's own loss is not finite
    window: int = 1

    @property
    def too_short(self) -> bool:
        """Fewer steps than the smoothing window, and no non-finite loss (that is no noise):
        the early gaps are single-step jitter, too few to call the curves alike or apart."""
        return len(self.steps) < self.window and math.inf not in self.gap

    @property
    def decided(self) -> bool:
        return self.reference_broken_at is None and not self.too_short

    @property
    def final(self) -> float:
        return self.gap[-1]

    @property
    def largest(self) -> tuple[float, int]:
        """(largest gap, its step); the first one on ties."""
        index = max(range(len(self.gap)), key=lambda i: (self.gap[i], -i))
        return self.gap[index], self.steps[index]

    @property
    def tracks(self) -> bool:
        return self.exceeded_at is None

    def verdict(self) -> str:
        if self.reference_broken_at is not None:
            return f"no verdict: the float32 loss is not finite at step {self.reference_broken_at}"
        if self.too_short:
            return (
                f"no verdict: {len(self.steps)} steps in common, fewer than "
                f"precision_ab.smooth_steps={self.window}"
            )
        if self.exceeded_at is None:
            return f"tracks float32 within {percent(self.threshold)}"
        return f"diverges after step {self.exceeded_at}"


def trailing_mean(values: Sequence[float], window: int) -> list[float]:
    """The mean of each value and the `window - 1` before it (fewer at the start)."""
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1) : i + 1]
        out.append(math.fsum(part) / len(part))
    return out


def compare(
    steps: Sequence[int],
    reference: Sequence[float | None],
    other: Sequence[float | None],
    threshold: float,
    window: int,
) -> Gap:
    """The gap of `other` to `reference` (losses at `steps`; None: not finite).

    Both runs see the same batches in the same order (same seed and data), so averaging
    both over the same trailing window compares the mean loss on the same samples; it
    removes the batch-to-batch jitter that a small numeric difference turns into large
    single-step ratios, without delaying the verdict by more than `window - 1` steps.
    """
    if not steps:
        raise ValueError("no common steps to compare")
    ref = trailing_mean([_num(x) for x in reference], window)
    oth = trailing_mean([_num(x) for x in other], window)
    gap = [_relative(o, r) for o, r in zip(oth, ref, strict=True)]
    exceeded = next((s for s, g in zip(steps, gap, strict=True) if not g <= threshold), None)
    broken = next((s for s, x in zip(steps, reference, strict=True) if not _finite(x)), None)
    return Gap(list(steps), gap, threshold, exceeded, broken, window)


def align(
    a_steps: Sequence[int],
    a: Sequence[float | None],
    b_steps: Sequence[int],
    b: Sequence[float | None],
) -> tuple[list[int], list[float | None], list[float | None]]:
    """The steps both curves have, with each curve's values at them."""
    in_b = dict(zip(b_steps, b, strict=True))
    common = [(s, x) for s, x in zip(a_steps, a, strict=True) if s in in_b]
    return [s for s, _ in common], [x for _, x in common], [in_b[s] for s, _ in common]


def percent(fraction: float) -> str:
    """0.05 -> '5%', 0.0123 -> '1.23%'; inf -> 'not finite'."""
    if not math.isfinite(fraction):
        return "not finite"
    return f"{fraction * 100:.3g}%"


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _num(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def _relative(value: float, reference: float) -> float:
    if not (math.isfinite(value) and math.isfinite(reference)):
        return math.inf
    if reference == 0.0:
        return 0.0 if value == 0.0 else math.inf
    return abs(value - reference) / abs(reference)
