"""Config -> objects. Shared by train.py and eval.py so the two never drift apart.

Every callback and logger comes from the config (conf/callbacks, conf/logger); this
module adds none of its own.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import lightning as L
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.accelerators import CUDAAccelerator
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar
from omegaconf import DictConfig, OmegaConf

from litforge import console, processes
from litforge.errors import ConfigError
from litforge.precision import (
    LIGHTNING_CPU_FP16_WARNING,
    apply_matmul_precision,
    check_hardware,
    explain,
    scaler_plugin,
)


def build_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    return _construct(cfg.data, "data")


def build_module(cfg: DictConfig) -> L.LightningModule:
    # _convert_="all": the module receives plain dicts and lists, so its saved
    # hyperparameters load with torch.load(weights_only=True).
    node = OmegaConf.to_container(cfg.model, resolve=True)
    # model.poison_step (tests of the numerics watch) is every LitforgeModule's, not one
    # model's constructor argument: LitforgeModule.poison takes it.
    poison = node.pop("poison_step", None)  # type: ignore[union-attr]
    module = _construct(OmegaConf.create(node), "model")
    if cfg.trainer.get("strategy") == "fsdp":  # before any process starts
        from litforge.fsdp import check_shardable

        check_shardable(module)
    if hasattr(module, "poison"):
        module.poison(poison)
    elif poison is not None:
        raise ConfigError(
            f"model.poison_step={poison}: {type(module).__name__} is not a LitforgeModule "
            "and cannot be poisoned; use model.poison_step=null"
        )
    return module


def _construct(node: DictConfig, group: str) -> Any:
    """instantiate(node); a constructor's refusal of its arguments becomes one line."""
    try:
        return instantiate(node, _convert_="all")
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        if isinstance(cause, (ValueError, TypeError)):
            raise ConfigError(f"{group}={node._target_} refused its arguments: {cause}") from err
        raise


def _instantiate_each(group: DictConfig | None) -> list[Any]:
    """Each entry's object; a constructor's ConfigError (its own one-line check of its
    arguments) comes out as itself, not inside Hydra's InstantiationException."""
    if not group:
        return []
    objects = []
    for item in group.values():
        if item is None:
            continue
        try:
            objects.append(instantiate(item, _convert_="all"))
        except InstantiationException as err:
            if isinstance(err.__cause__, ConfigError):
                raise err.__cause__ from None
            raise
    return objects


def build_callbacks(cfg: DictConfig) -> list[L.Callback]:
    return _instantiate_each(cfg.get("callbacks"))


def build_loggers(cfg: DictConfig) -> list[Any]:
    return _instantiate_each(cfg.get("logger"))


def build_trainer(
    cfg: DictConfig, extra_callbacks: Sequence[L.Callback] = (), **overrides: Any
) -> L.Trainer:
    """Trainer(**cfg.trainer) with the configured callbacks and loggers (plus
    `extra_callbacks`), after checking the precision against the hardware; sets the
    precision's float32 matmul precision and, for 16-mixed on CUDA, its GradScaler."""
    kwargs = {key: _trainer_value(value) for key, value in cfg.trainer.items()}
    kwargs.update(overrides)
    processes.prepare(cfg, kwargs)  # how many processes, how they meet and end
    apply_matmul_precision(cfg)
    plugin = scaler_plugin(cfg, str(kwargs.get("accelerator", "auto")))
    if plugin is not None:  # 16-mixed on CUDA: our GradScaler settings
        plugins = kwargs.get("plugins") or []
        kwargs["plugins"] = [*(plugins if isinstance(plugins, list) else [plugins]), plugin]
        kwargs["precision"] = None  # Lightning refuses both; the plugin says 16-mixed
    loggers = build_loggers(cfg)
    callbacks = [*build_callbacks(cfg), *extra_callbacks]
    # Lightning raises for both; the config stays composable with logger=none or
    # trainer.enable_progress_bar=false instead.
    if not loggers:
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    if kwargs.get("enable_progress_bar") is False:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=LIGHTNING_CPU_FP16_WARNING)
        trainer = L.Trainer(**kwargs, callbacks=callbacks, logger=loggers or False)
    requested = str(cfg.trainer.precision)
    check_hardware(requested, on_gpu=isinstance(trainer.accelerator, CUDAAccelerator))
    note = explain(requested, effective_precision(trainer))
    if note:
        console.warn(note)
    return trainer


def _trainer_value(value: Any) -> Any:
    """A `{_target_: ...}` entry (a profiler, a strategy object) becomes that object."""
    if OmegaConf.is_dict(value) and "_target_" in value:
        return instantiate(value, _convert_="all")
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


def effective_precision(trainer: L.Trainer) -> str:
    return str(trainer.precision)


def effective_batch_size(cfg: DictConfig, trainer: L.Trainer) -> int:
    """Samples per optimizer step, said once and given to every logger as a hyperparameter."""
    size = cfg.data.batch_size * trainer.accumulate_grad_batches * trainer.world_size
    console.info(
        "effective batch size %d = data.batch_size %d x accumulate_grad_batches %d x %d processes",
        size, cfg.data.batch_size, trainer.accumulate_grad_batches, trainer.world_size,
    )  # fmt: skip
    for logger in trainer.loggers:
        logger.log_hyperparams({"effective_batch_size": size})
    return size
