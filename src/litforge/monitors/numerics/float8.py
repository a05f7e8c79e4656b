"""precision=fp8: what the float8 casts of each Float8Linear do to its tensors.

torchao scales each tensor by float8's max over its amax (per tensor, or per row for
fp8-rowwise) before the cast, so a finite amax never overflows; what goes wrong is
- saturation: a non-finite amax makes the scale 0 and the cast NaN (FP8's overflow, the
  counterpart of FP16's), and
- underflow: with one scale for the whole tensor, an outlier pushes the other values under
  float8's smallest subnormal, to zero (rowwise scales bound this to their row).
With `callbacks.numerics.activations=true` the watch hooks every Float8Linear and records,
on the device, the largest amax of its input and of its output gradient, the first step
either was not finite, and the largest share of values that rounded to zero.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from litforge.precision.fp8.training import describe, is_float8


def precision_label(trainer: Any, module: torch.nn.Module) -> str:
    """The precision a report names: Lightning's, plus torchao's float8 layers where the
    model has them (precision=fp8 runs bf16-mixed around them)."""
    float8 = describe(module)
    return f"{trainer.precision} + {float8}" if float8 else str(trainer.precision)


def _subnormal(dtype: torch.dtype) -> float:
    """The smallest positive value of a float8 format (its subnormal step)."""
    info = torch.finfo(dtype)
    mantissa = {torch.float8_e4m3fn: 3, torch.float8_e5m2: 2}[dtype]
    return info.smallest_normal * 2.0**-mantissa


# Forward tensors cast to e4m3 (max 448), output gradients to e5m2 (max 57344).
FORMATS = {
    "input": (float(torch.finfo(torch.float8_e4m3fn).max), _subnormal(torch.float8_e4m3fn)),
    "grad": (float(torch.finfo(torch.float8_e5m2).max), _subnormal(torch.float8_e5m2)),
}


def _rowwise(module: torch.nn.Module) -> bool:
    granularity = module.config.cast_config_input.scaling_granularity  # type: ignore[union-attr]
    return str(getattr(granularity, "value", granularity)) == "axiswise"


def cast_stats(x: torch.Tensor, kind: str, rowwise: bool) -> torch.Tensor:
    """[amax (inf when not finite), share of nonzero values the cast rounds to zero]."""
    top, smallest = FORMATS[kind]
    x = x.detach().float()
    magnitude = x.abs()
    dims = (-1,) if rowwise else tuple(range(x.dim()))
    amax = magnitude.amax(dim=dims, keepdim=True)
    scale = top / amax.clamp(min=1e-12)  # torchao's scale: the amax maps to float8's max
    lost = ((magnitude * scale) < smallest / 2) & (magnitude > 0)
    peak = torch.nan_to_num(amax.max(), nan=math.inf, posinf=math.inf)
    return torch.stack([peak, lost.float().mean()])


class Float8Casts:
    """Hooks on every Float8Linear of a module: per layer, on the device, [input amax,
    gradient amax, first step with a non-finite one or -1, input underflow, gradient
    underflow], read once at the end."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.step = 0.0  # the global step, set by the watch before each batch
        self._state: dict[str, torch.Tensor] = {}
        self._handles = []
        for name, sub in module.named_modules():
            if is_float8(sub):
                self._handles.append(sub.register_forward_hook(
                    functools.partial(self._record, name, _rowwise(sub))))  # fmt: skip

    def __len__(self) -> int:
        return len(self._handles)

    @classmethod
    def of(cls, module: torch.nn.Module) -> Float8Casts | None:
        """Hooks on `module`'s float8 layers; None when it has none."""
        casts = cls(module)
        return casts if len(casts) else None

    def _slot(self, name: str, device: torch.device) -> torch.Tensor:
        state = self._state.get(name)
        if state is None:  # insertion order: the order the layers ran
            state = self._state[name] = torch.tensor([0.0, 0.0, -1.0, 0.0, 0.0], device=device)
        return state

    def _update(self, name: str, x: torch.Tensor, kind: str, rowwise: bool) -> None:
        stats = cast_stats(x, kind, rowwise)
        state = self._slot(name, x.device)
        at, lost = (0, 3) if kind == "input" else (1, 4)
        first = ~torch.isfinite(stats[0]) & (state[2] < 0)
        state[2] = torch.where(first, self.step, state[2])
        state[at] = torch.maximum(state[at], stats[0])
        state[lost] = torch.maximum(state[lost], stats[1])

    def _record(self, name: str, rowwise: bool, module: Any, args: Any, output: Any) -> None:
        if not (module.training and args and isinstance(args[0], torch.Tensor)):
            return
        self._update(name, args[0], "input", rowwise)
        if isinstance(output, torch.Tensor) and output.requires_grad:
            # The output's gradient is what the layer's backward casts to e5m2.
            output.register_hook(lambda grad: self._update(name, grad, "grad", rowwise))

    def read(self) -> list[tuple[str, float, float, int, float, float]]:
        """(layer, input amax, gradient amax, first non-finite step or -1, input underflow,
        gradient underflow), in the order the layers ran; one read for all."""
        if not self._state:
            return []
        values = torch.stack(list(self._state.values())).cpu().tolist()
        return [(name, a, g, int(first), ui, ug)
                for name, (a, g, first, ui, ug) in zip(self._state, values, strict=True)]  # fmt: skip

    def clear(self) -> None:
        self._state.clear()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def float8_table(rows: list[tuple[str, float, float, int, float, float]], limit: int = 10) -> str:
    """The layers whose float8 cast saturated first (by step), then the worst underflow."""
    over = sorted((r for r in rows if r[3] >= 0), key=lambda r: r[3])
    rest = sorted((r for r in rows if r[3] < 0), key=lambda r: max(r[4], r[5]), reverse=True)
    top = (over + rest)[:limit]
    width = max((len(r[0]) for r in top), default=5)
    lines = [
        "numerics: float8 casts per Linear layer in training: the largest amax of its input "
        "(e4m3) and output gradient (e5m2), and the largest share of nonzero values that "
        "rounded to zero; a non-finite amax saturates the cast (scale 0, output NaN):"
    ]
    for name, a, g, first, ui, ug in top:
        flag = f"  saturates float8 from step {first}" if first >= 0 else ""
        lines.append(f"  {name:<{width}}  amax {a:<9.3g} grad amax {g:<9.3g} "
                     f"underflow {ui:.1%} / {ug:.1%}{flag}")  # fmt: skip
    return "\n".join(lines)
