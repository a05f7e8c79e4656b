"""Config -> objects. Shared by train.py and eval.py so the two never drift apart."""

from __future__ import annotations

import warnings
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.accelerators import CUDAAccelerator
from lightning.pytorch.callbacks import LearningRateMonitor, RichProgressBar
from omegaconf import DictConfig, OmegaConf

from litforge import console
from litforge.callbacks.csv_log import CsvLogPosition, ResumableCSVLogger
from litforge.callbacks.epoch_log import EpochLog
from litforge.precision import LIGHTNING_CPU_FP16_WARNING, check_hardware, explain


def build_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    return instantiate(cfg.data, _convert_="all")


def build_module(cfg: DictConfig) -> L.LightningModule:
    # _convert_="all": the module receives plain dicts and lists, so its saved
    # hyperparameters load with torch.load(weights_only=True).
    return instantiate(cfg.model, _convert_="all")


def _instantiate_each(group: DictConfig | None) -> list[Any]:
    if not group:
        return []
    return [instantiate(item, _convert_="all") for item in group.values() if item is not None]


def build_callbacks(cfg: DictConfig, with_logger: bool = True) -> list[L.Callback]:
    callbacks = _instantiate_each(cfg.get("callbacks"))
    if not with_logger:  # LearningRateMonitor refuses to run without a logger
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    callbacks.append(EpochLog())
    if console.interactive() and cfg.trainer.get("enable_progress_bar", True) is not False:
        callbacks.append(RichProgressBar())
    return callbacks


def build_loggers(cfg: DictConfig) -> list[Any]:
    return _instantiate_each(cfg.get("logger"))


def build_trainer(
    cfg: DictConfig, callbacks: list[L.Callback], loggers: list[Any], **overrides: Any
) -> L.Trainer:
    """Trainer(**cfg.trainer) after checking the precision against the hardware."""
    kwargs = {key: _trainer_value(value) for key, value in cfg.trainer.items()}
    if not console.interactive():
        kwargs["enable_progress_bar"] = False  # carriage-return bars garble logs
    kwargs.update(overrides)
    if any(isinstance(logger, ResumableCSVLogger) for logger in loggers):
        callbacks = [*callbacks, CsvLogPosition()]  # keeps metrics.csv exact across resumes
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
