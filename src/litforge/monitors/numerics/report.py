"""The text of the numerics watch: one block on the first fault, a table of activations.

Kept apart from the callback (`numerics.py`), which only measures and decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504


@dataclass(frozen=True)
class Fault:
    """What the watch saw at the first bad optimizer step (host values)."""

    step: int
    loss_finite: bool
    grad_norms: list[float]  # per parameter, float32, in `names` order
    names: list[str]
    scale: float | None = None  # 16-mixed: the GradScaler's scale that step ran with
    skipped: int = 0  # 16-mixed: optimizer steps the GradScaler skipped so far
    in_row: int = 0  # 16-mixed: ... of which the latest in a row

    @property
    def first_bad_parameter(self) -> str | None:
        return next(
            (n for n, v in zip(self.names, self.grad_norms, strict=False) if not math.isfinite(v)),
            None,
        )

    @property
    def total_norm(self) -> float:
        return math.sqrt(sum(v * v for v in self.grad_norms))


def what(fault: Fault, min_scale: float, max_in_row: int) -> str | None:
    """The fault in a few words ('non-finite loss', ...); None when the step had none."""
    if not fault.loss_finite:
        return "non-finite loss"
    if fault.scale is None:
        return None if fault.first_bad_parameter is None else "non-finite gradient"
    # Under a GradScaler a step whose gradients overflow is skipped: normal, unless too many.
    if fault.scale < min_scale:
        return (
            f"loss scale collapsed to {fault.scale:g} "
            f"(below callbacks.numerics.min_loss_scale={min_scale:g})"
        )
    if fault.in_row >= max_in_row:
        return (
            f"{fault.in_row} optimizer steps in a row skipped by the GradScaler "
            f"(callbacks.numerics.max_skipped_in_row={max_in_row})"
        )
    return None


def block(
    fault: Fault,
    summary: str,
    precision: str,
    policy: str,
    outcome: str,
    lr: float | None,
    clip: float | None,
    activations_on: bool,
) -> str:
    """The report: the step, the precision, the scaler, the parameter, what to try."""
    lines = [f"numerics: {summary} at step {fault.step} (precision {precision})"]
    param = fault.first_bad_parameter
    if param is not None:
        module = param.rpartition(".")[0] or param
        lines.append(f"  first parameter with a non-finite gradient: {param} (module {module})")
    lines.append(f"  gradient norm before clipping: {fault.total_norm:.4g}")
    if fault.scale is not None:
        lines.append(
            f"  GradScaler: loss scale {fault.scale:g}, optimizer steps skipped so far "
            f"{fault.skipped} ({fault.in_row} in a row; skipping a step on overflow is normal)"
        )
    lines.append(f"  policy {policy}: {outcome}")
    lines.append("  what to try:")
    lines.extend(f"    - {hint}" for hint in hints(precision, lr, clip, activations_on))
    return "\n".join(lines)


def hints(precision: str, lr: float | None, clip: float | None, activations_on: bool) -> list[str]:
    half = "16" in precision  # 16-mixed, 16-true, bf16-mixed, bf16-true
    out = []
    if half and not precision.startswith("bf16"):
        out.append(
            "precision=bf16-mixed: bfloat16 has float32's exponent range, so nothing "
            "overflows and no loss scaling is needed (Ampere or newer)"
        )
    if lr is not None:
        out.append(f"a lower learning rate: model.optimizer.lr={lr / 10:.3g} (now {lr:.3g})")
    if not clip:
        out.append("clip gradients: trainer.gradient_clip_val=1.0")
    if half:
        out.append(
            "keep the module that overflows in float32 (autocast off around it, its input "
            "cast with .float())"
        )
    else:
        out.append("float32 rarely overflows: look for inf/NaN in the inputs or the loss")
    if "float8" in precision:  # precision=fp8: bf16 autocast around torchao's layers
        out.append(
            "precision=fp8-rowwise: a scale per row, so one outlier cannot saturate or flush "
            "a whole tensor; or keep the layer in bf16: precision.fp8_skip=[its name]"
        )
    if not activations_on:
        what_shows = "module overflows" if "float8" not in precision else "float8 cast saturates"
        out.append(f"callbacks.numerics.activations=true shows which {what_shows} first")
    return out


def activation_table(rows: list[tuple[str, float, int]], limit: int = 10) -> str:
    """The modules that overflowed float16 first (by step, then in the order they ran:
    the first is where it starts), then the largest activations."""
    over = sorted((r for r in rows if r[2] >= 0), key=lambda r: r[2])  # stable: run order
    rest = sorted((r for r in rows if r[2] < 0), key=lambda r: r[1], reverse=True)
    top = (over + rest)[:limit]
    width = max((len(name) for name, _, _ in top), default=6)
    lines = [
        "numerics: largest activation |x| per module in training, as a fraction of "
        f"float16's max ({FP16_MAX:g}); above 1 overflows in float16:"
    ]
    for name, fraction, first in top:
        flag = f"  overflows float16 from step {first}" if first >= 0 else ""
        lines.append(f"  {name:<{width}}  {fraction:<9.3g}{flag}")
    return "\n".join(lines)
