"""Precision names, hardware checks, and the precision Lightning actually runs."""

from __future__ import annotations

import torch

from litforge.errors import ConfigError

# What `precision=` (the conf/precision group, i.e. Trainer(precision=...)) accepts.
PRECISIONS = ("32", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")

# Lightning's own warning when it swaps 16-mixed for bf16-mixed on CPU; we replace it
# with one line that names both precisions and record both in the run directory.
LIGHTNING_CPU_FP16_WARNING = r".*AMP with fp16 is not supported on CPU.*"


def normalize(name: str) -> str:
    """Lightning's canonical spelling: '32' -> '32-true'."""
    return "32-true" if str(name) == "32" else str(name)


def check_hardware(requested: str, on_gpu: bool) -> None:
    """Fail before training when the GPU cannot run the requested precision."""
    if on_gpu and "bf16" in requested and not torch.cuda.is_bf16_supported():
        name = torch.cuda.get_device_name()
        raise ConfigError(
            f"precision={requested} needs bfloat16, which this GPU ({name}) does not support "
            "(it needs compute capability 8.0+, Ampere or newer); use precision=16-mixed"
        )


def explain(requested: str, effective: str) -> str | None:
    """One line when Lightning runs a different precision than the one asked for."""
    if normalize(requested) == normalize(effective):
        return None
    return (
        f"precision: requested {requested}, effective {effective} "
        "(float16 autocast is not supported on CPU, so Lightning runs bfloat16 autocast)"
    )
