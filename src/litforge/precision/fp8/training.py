"""Converting a model's Linear layers to torchao's Float8Linear, and the Lightning plugin."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn

from litforge import console
from litforge.errors import ConfigError
from litforge.precision.fp8.layers import Layer, choose, summary

RECIPES = ("tensorwise", "rowwise")
OPTION = {"tensorwise": "fp8", "rowwise": "fp8-rowwise"}  # conf/precision/<option>.yaml
DEFAULT_MIN_DIM = 2048  # the schema's precision.fp8_min_dim (torchao's H100 tables)


@contextmanager
def _quiet_import() -> Iterator[None]:
    # torchao's wheel ships CUDA-only kernels (cutlass sm90a, mxfp8) and logs a warning for
    # each one a CPU build of torch cannot load, plus a torch pytree deprecation note; none
    # of them concerns float8 training, which runs through torch._scaled_mm.
    loggers = [logging.getLogger(n) for n in ("torchao", "torch.utils._pytree")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def torchao_float8() -> ModuleType:
    """`torchao.float8`, or one line naming the extra to install."""
    try:
        with _quiet_import():
            import torchao.float8 as float8
    except ImportError as err:
        raise ConfigError(
            f"precision=fp8 needs torchao, which is not installed ({err}); "
            "pip install 'litforge[fp8]'"
        ) from None
    return float8


def is_float8(module: nn.Module) -> bool:
    """Whether `module` is a torchao Float8Linear (without importing torchao)."""
    kind = type(module)
    return kind.__name__ == "Float8Linear" and kind.__module__.startswith("torchao.")


def float8_count(module: nn.Module) -> int:
    return sum(1 for m in module.modules() if is_float8(m))


def convert(
    module: nn.Module, recipe: str = "tensorwise", min_dim: int = DEFAULT_MIN_DIM,
    skip: Sequence[str] = (),
) -> list[Layer]:  # fmt: skip
    """Swap the Linear layers the filter picks for Float8Linear, in place; every Linear
    layer, with where it trains. Layers already converted stay as they are."""
    if recipe not in RECIPES:
        raise ConfigError(f"precision.fp8={recipe!r} is not a recipe; use one of {RECIPES}")
    if any(_is_sharded(p) for p in module.parameters()):
        raise ConfigError(
            "precision=fp8: the model is already sharded (torch's fully_shard ran), and FSDP2 "
            "keeps the layers it sharded, so a layer swapped now would never see its gathered "
            "weight; convert before sharding (litforge converts in build_module)"
        )
    layers = choose(module, min_dim, skip)
    picked = {layer.name for layer in layers if layer.fp8}
    float8 = torchao_float8()
    config = float8.Float8LinearConfig.from_recipe_name(recipe)
    float8.convert_to_float8_training(
        module,
        config=config,
        module_filter_fn=lambda mod, fqn: fqn in picked and not is_float8(mod),
    )
    return layers


def convert_like(module: nn.Module, source: nn.Module) -> int:
    """Convert the Linear layers of `module` (a copy of `source`, e.g. the memory budget's)
    that are Float8Linear in `source`, with the same float8 config; how many."""
    configs = {name: m.config for name, m in source.named_modules() if is_float8(m)}
    if not configs:
        return 0
    float8 = torchao_float8()
    config = next(iter(configs.values()))
    float8.convert_to_float8_training(
        module, config=config, module_filter_fn=lambda mod, fqn: fqn in configs
    )
    return len(configs)


def _is_sharded(param: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(param, DTensor)


class Float8Precision(MixedPrecision):
    """Lightning's bf16-mixed precision with torchao float8 Linear layers: a plugin for a
    plain Lightning Trainer (`Trainer(plugins=[Float8Precision()])`, one process or DDP),
    and what litforge's memory budget measures precision=fp8 by. Under FSDP2 convert the
    model before `fully_shard` instead (`convert`): Lightning's ModelParallelStrategy calls
    `convert_module` only after `configure_model` has sharded it."""

    def __init__(
        self, recipe: str = "tensorwise", min_dim: int = DEFAULT_MIN_DIM,
        skip: Sequence[str] = (), device: str = "cuda",
    ) -> None:  # fmt: skip
        super().__init__("bf16-mixed", device)
        self.recipe, self.min_dim, self.skip = recipe, int(min_dim), tuple(skip)
        self.layers: list[Layer] = []

    def convert_module(self, module: nn.Module) -> nn.Module:
        self.layers = convert(module, self.recipe, self.min_dim, self.skip)
        return module

    def announce(self) -> str:
        return summary(self.layers, self.recipe)


def describe(module: Any) -> str | None:
    """ "float8 (N Linear layers)" for a model with Float8Linear layers, else None."""
    count = float8_count(module) if isinstance(module, nn.Module) else 0
    return f"float8 in {count} Linear layers" if count else None


def log_summary(layers: Sequence[Layer], recipe: str) -> None:
    console.info("%s", summary(layers, recipe))
