"""Which Linear layers train in FP8: the filter the config sets, and the start-up line.

A layer stays in bfloat16 when a dimension is not a multiple of 16 (torch._scaled_mm
refuses it), when its smaller dimension is under `precision.fp8_min_dim` (the casts to
float8 then cost more than the faster matmul saves: torchao's H100 tables put a
1024x2048x1024 linear at 0.80x), or when its name contains one of `precision.fp8_skip`.
Pure shape arithmetic: no torchao import, so `litforge plan` uses it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

ALIGN = 16  # torch._scaled_mm's rule for both dimensions


@dataclass(frozen=True)
class Layer:
    """One Linear layer: its name, its (in, out) features, and where it trains."""

    name: str
    in_features: int
    out_features: int
    bias: bool
    fp8: bool
    reason: str  # why it stays in bfloat16 ("" when fp8)

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


def why_not(name: str, in_f: int, out_f: int, min_dim: int, skip: Sequence[str]) -> str:
    """Why a Linear of this name and shape stays in bfloat16; "" when it goes to FP8."""
    hit = next((s for s in skip if s in name), None)
    if hit is not None:
        return f"named in precision.fp8_skip ({hit!r})"
    if in_f % ALIGN or out_f % ALIGN:
        return f"{in_f}x{out_f} is not a multiple of {ALIGN}"
    if min(in_f, out_f) < min_dim:
        return f"{in_f}x{out_f} is under precision.fp8_min_dim={min_dim}"
    return ""


def choose(module: nn.Module, min_dim: int, skip: Sequence[str] = ()) -> list[Layer]:
    """Every nn.Linear under `module` (converted ones included), in module order."""
    found = []
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Linear):
            reason = why_not(name, sub.in_features, sub.out_features, min_dim, skip)
            found.append(Layer(name, sub.in_features, sub.out_features, sub.bias is not None,
                               not reason, reason))  # fmt: skip
    return found


def summary(layers: Sequence[Layer], recipe: str) -> str:
    """The one start-up line: "fp8: 4 of 5 linear layers (49,152 of 57,344 parameters)
    train in FP8 (tensorwise); bf16: head (65x64 is not a multiple of 16)"."""
    chosen = [layer for layer in layers if layer.fp8]
    line = (
        f"fp8: {len(chosen)} of {len(layers)} linear layers "
        f"({sum(x.params for x in chosen):,} of {sum(x.params for x in layers):,} "
        f"parameters) train in FP8 ({recipe})"
    )
    kept = [layer for layer in layers if not layer.fp8]
    if kept:
        shown = ", ".join(f"{x.name} ({x.reason})" for x in kept[:3])
        more = f" and {len(kept) - 3} more" if len(kept) > 3 else ""
        line += f"; bf16: {shown}{more}"
    return line
