"""Is reduced precision safe for inference: one checkpoint's test metrics in each precision,
their relative gap to float32, and a verdict against a threshold.

`int8-dynamic` quantizes the Linear layers' weights to int8 (activations quantized on the
fly): with torchao where it is installed, else with torch's own
`torch.ao.quantization.quantize_dynamic` (CPU only); elsewhere it is reported unavailable.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import torch
from torch import nn

from litforge.errors import ConfigError
from litforge.precision import PRECISIONS, normalize

INT8 = "int8-dynamic"
KEY = "inference.precisions"


def check_precisions(values: Any) -> list[str]:
    """The list to evaluate, float32 first (the reference); one line for a bad name."""
    if isinstance(values, str) or not all(isinstance(v, (str, int)) for v in values):
        raise ConfigError(f"{KEY}={values!r} must be a list, e.g. [32,bf16-true,{INT8}]")
    names = [str(v) for v in values]
    for name in names:
        if name not in (*PRECISIONS, INT8):
            raise ConfigError(
                f"{KEY}: {name!r} is not a precision; use {', '.join((*PRECISIONS, INT8))}"
            )
    found = ["32"] + [n for n in names if normalize(n) != "32-true"]
    return list(dict.fromkeys(found))


def int8_backend(device: torch.device) -> str | None:
    """Which int8 dynamic quantization runs on `device`, or None."""
    if importlib.util.find_spec("torchao") is not None:
        return "torchao"
    return "torch.ao.quantization.quantize_dynamic" if device.type == "cpu" else None


def quantize(module: nn.Module, backend: str) -> nn.Module:
    """The module with int8 weights in its Linear layers."""
    if backend == "torchao":
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        quantize_(module, Int8DynamicActivationInt8WeightConfig())
        return module
    return torch.ao.quantization.quantize_dynamic(module.eval(), {nn.Linear}, dtype=torch.qint8)


def report(
    metrics: dict[str, dict[str, float]],
    effective: dict[str, str],
    unavailable: dict[str, str],
    threshold: float,
) -> dict[str, Any]:
    """Per precision: its metrics, the relative gap of each to float32's, and a verdict."""
    reference = metrics["32"]
    rows = []
    for name, found in metrics.items():
        gaps = {
            k: (v - reference[k]) / abs(reference[k]) if reference[k] else v - reference[k]
            for k, v in found.items()
            if k in reference and math.isfinite(v)
        }
        worst = max(gaps, key=lambda k: abs(gaps[k]), default=None)
        if name == "32":
            verdict = "reference"
        elif worst is None or abs(gaps[worst]) <= threshold:
            verdict = f"safe: every metric within {threshold:.1%} of float32"
        else:
            verdict = f"not safe: {worst} {gaps[worst]:+.2%} against float32"
        rows.append({"precision": name, "ran_as": effective[name], "metrics": found,
                     "gaps": gaps, "verdict": verdict})  # fmt: skip
    rows += [{"precision": name, "ran_as": None, "metrics": {}, "gaps": {},
              "verdict": f"unavailable: {why}"} for name, why in unavailable.items()]  # fmt: skip
    return {"threshold": threshold, "precisions": rows}
