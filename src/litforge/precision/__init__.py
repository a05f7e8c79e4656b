"""Precision names, hardware checks, the precision Lightning actually runs, and the settings
a precision brings (float32 matmul precision, the GradScaler of 16-mixed, fp8's float8
Linear layers: `litforge.precision.fp8`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf

from litforge.errors import ConfigError
from litforge.precision_settings import PrecisionSettings

if TYPE_CHECKING:
    from lightning.pytorch.plugins.precision import MixedPrecision

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


def apply_matmul_precision(cfg: DictConfig) -> str:
    """torch.set_float32_matmul_precision(cfg.precision.matmul), its schema's default
    (`highest`, precision=32's) when unset.

    Process-wide, so it is set on every build: an in-process sweep's next job may have
    another precision and must not inherit this one's.
    """
    value = PrecisionSettings.of(cfg).matmul
    torch.set_float32_matmul_precision(value)
    return value


def on_cuda(accelerator: str) -> bool:
    """Whether Lightning will train on CUDA with `trainer.accelerator=accelerator`."""
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())


def scaler_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """torch.amp.GradScaler's knobs from `precision.*` (conf/precision/16-mixed.yaml)."""
    knobs = PrecisionSettings.of(cfg)
    return {
        "init_scale": float(knobs.init_scale),
        "growth_factor": float(knobs.growth_factor),
        "backoff_factor": float(knobs.backoff_factor),
        "growth_interval": int(knobs.growth_interval),
    }


def scaler_plugin(cfg: DictConfig, accelerator: str) -> MixedPrecision | None:
    """For 16-mixed on CUDA: Lightning's MixedPrecision with a GradScaler built from the
    config's knobs (for Trainer(plugins=...)); None otherwise. On CPU Lightning runs
    16-mixed as bf16-mixed, which has no scaler."""
    if normalize(cfg.trainer.precision) != "16-mixed" or not on_cuda(accelerator):
        return None
    from lightning.pytorch.plugins.precision import MixedPrecision

    scaler = torch.amp.GradScaler("cuda", **scaler_kwargs(cfg))
    return MixedPrecision("16-mixed", "cuda", scaler=scaler)


def convert_module(cfg: DictConfig, module: torch.nn.Module) -> None:
    """precision=fp8 / fp8-rowwise: the model's suitable Linear layers to torchao float8,
    in place, when the model is built (before compile, sharding and the optimizer; see
    litforge.precision.fp8). Nothing for the other precisions; torchao is imported only here."""
    if PrecisionSettings.of(cfg).fp8 == "off":
        return
    from litforge.precision.fp8.run import convert_for_run

    convert_for_run(cfg, module, on_gpu=on_cuda(str(cfg.trainer.get("accelerator", "auto"))))


def effective_precision(trainer: Any) -> str:
    """The precision a built Trainer runs (Lightning's name for it); with its model's
    float8 layers where it has them (precision=fp8 runs bf16-mixed around them)."""
    module = getattr(trainer, "lightning_module", None)
    if module is not None:
        from litforge.precision.fp8.training import describe  # torchao only if it has them

        float8 = describe(module)
        if float8:
            return f"{trainer.precision} + {float8}"
    return str(trainer.precision)


def requested_precision(cfg: DictConfig) -> str:
    """The precision a run asked for: the precision option's name for fp8 and fp8-rowwise
    (trainer.precision there is the bf16-mixed around the float8 layers)."""
    recipe = OmegaConf.select(cfg, "precision.fp8", default=None)
    if recipe:
        return "fp8" if recipe == "tensorwise" else f"fp8-{recipe}"
    return str(cfg.trainer.precision)
