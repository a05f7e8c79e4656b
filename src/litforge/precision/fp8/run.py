"""precision=fp8 in a litforge run: the checks before training, then the conversion."""

from __future__ import annotations

from collections.abc import Callable

import torch
from omegaconf import DictConfig
from torch import nn

from litforge.errors import ConfigError
from litforge.precision.fp8.cards import refusal
from litforge.precision.fp8.layers import Layer
from litforge.precision.fp8.training import convert, log_summary
from litforge.precision_settings import PrecisionSettings


def cuda_card() -> tuple[str, tuple[int, int]]:
    """CUDA device 0's name and compute capability."""
    return torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0)


def check_card(on_gpu: bool, card: Callable[[], tuple[str, tuple[int, int]]] = cuda_card) -> None:
    """On a CUDA GPU without FP8 tensor cores: one line naming it and what to use instead."""
    if not on_gpu:
        return  # CPU: torch._scaled_mm runs float8 there too (slowly), so tests run it
    name, capability = card()
    line = refusal(name, capability)
    if line is not None:
        raise ConfigError(line)


def convert_for_run(cfg: DictConfig, module: nn.Module, on_gpu: bool) -> list[Layer] | None:
    """For `precision.fp8` other than off: check the card, convert the model in place and
    log the one start-up line; None (nothing done) otherwise."""
    settings = PrecisionSettings.of(cfg)
    if settings.fp8 == "off":
        return None
    check_card(on_gpu)
    layers = convert(module, settings.fp8, settings.fp8_min_dim, settings.fp8_skip or ())
    log_summary(layers, settings.fp8)
    return layers
