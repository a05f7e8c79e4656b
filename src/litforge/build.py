"""Config -> objects. Shared by train.py and eval.py so the two never drift apart.

Every callback and logger comes from the config (conf/callbacks, conf/logger); this
module adds only `ModelRecord` (checkpoints loadable with weights_only) and what the recipe
hands it. A callback's `check_before_fit` (litforge.hooks.ChecksBeforeFit) runs once the
Trainer is built, before any process starts: its refusals come before any training."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.accelerators import CUDAAccelerator
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar
from omegaconf import DictConfig, OmegaConf

from litforge import compiling, console, hooks, precision
from litforge.checkpointing.model_record import ModelRecord
from litforge.errors import ConfigError
from litforge.extras import missing_extra
from litforge.launch import processes
from litforge.launch.fsdp import check_shardable, is_fsdp_run
from litforge.launch.settings import ProcessSettings
from litforge.models.freeze import KEY as FREEZE_KEY
from litforge.models.freeze import freeze
from litforge.models.settings import FreezeSettings
from litforge.precision import (
    LIGHTNING_CPU_FP16_WARNING,
    apply_matmul_precision,
    check_hardware,
    effective_precision,
    explain,
    scaler_plugin,
)
from litforge.tracking import lifecycle as tracking


def build_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    announce("data", cfg.data)
    datamodule = construct(cfg.data, "data")
    check_kind(datamodule, L.LightningDataModule, "data", cfg.data)
    return datamodule


def check_kind(built: Any, base: type, group: str, node: DictConfig) -> None:
    """`model`/`data` must build lightning's LightningModule/LightningDataModule (Lightning's
    Trainer refuses anything else deep inside `fit`); one line, naming the usual cause, a
    class of the standalone `pytorch_lightning` package, with its one-line fix."""
    if isinstance(built, base):
        return
    target = f"{group}._target_={node.get('_target_')}"
    name = base.__name__
    if any(
        kind.__module__.startswith("pytorch_lightning.") and kind.__name__ == name
        for kind in type(built).__mro__
    ):
        raise ConfigError(
            f"{target} is a pytorch_lightning.{name}; litforge trains with the `lightning` "
            f"package, whose Trainer refuses it: import {name} from lightning.pytorch "
            "(`import lightning.pytorch as pl`)"
        )
    raise ConfigError(f"{target} built a {_class_name(built)}, not a lightning.pytorch.{name}")


def announce(path: str, node: Any) -> None:
    """One start-up line for an object the config builds, by its `_target_` (as
    lightning-hydra-template logs them), and one for each `_target_` child it is given."""
    if not (OmegaConf.is_dict(node) and "_target_" in node):
        return
    partial = " (partial)" if node.get("_partial_") else ""
    console.info("building %s <%s>%s", path, node.get("_target_"), partial)
    for key, child in node.items():
        if key != "_target_" and OmegaConf.is_dict(child) and "_target_" in child:
            announce(f"{path}.{key}", child)


def build_module(cfg: DictConfig, compiled: bool = True) -> L.LightningModule:
    """The LightningModule of `cfg.model` (its `_target_` children, the net, built first
    and passed in), `model.freeze` and precision=fp8's float8 layers applied, its optimizer
    built once to check it is one; `compile.enabled=true` compiles it in place (a missing
    compiler is one line) unless `compiled=False` (the memory budget measures it uncompiled)."""
    announce("model", cfg.model)
    module = construct(cfg.model, "model")
    check_kind(module, L.LightningModule, "model", cfg.model)
    freeze(module, FreezeSettings.of(cfg).freeze)
    precision.convert_module(cfg, module)  # before compile, sharding and the optimizer
    check_optimizer(cfg.model, module)
    if is_fsdp_run(cfg):  # before any process starts
        check_shardable(module)
    settings = compiling.options(cfg) if compiled else None
    if settings is not None:
        compiling.compile_in_place(module, settings)
    return module


def construct(node: DictConfig, group: str) -> Any:
    """instantiate(node) as Hydra's `instantiate` delivers it: nested config values arrive
    as DictConfig/ListConfig (`self.hparams.loss.name` works), unless the node sets
    `_convert_` (`all`, `partial`, `object`), which is honoured; a constructor's refusal
    of its arguments becomes one line naming the config path it came from. Checkpoints
    stay plain whatever arrives (`ModelRecord` stores the config such values came from)."""
    contents = OmegaConf.to_container(node, resolve=True)
    if group == "model":  # litforge's own key (litforge.models.freeze), not an argument
        contents.pop(FREEZE_KEY, None)  # type: ignore[union-attr]
    plain = OmegaConf.create(contents)
    try:
        return instantiate(plain)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        extra = missing_extra(err)  # a model or data of an extra (model=hf_causal_lm: hf)
        if extra:
            raise ConfigError(extra) from None
        if isinstance(cause, (ValueError, TypeError)):
            found = re.search(r"^full_key: (\S+)", str(err), re.MULTILINE)
            path = f"{group}.{found.group(1)}" if found else group
            target = OmegaConf.select(plain, found.group(1)) if found else plain
            raise refusal(path, target, cause) from None
        raise


def refusal(path: str, node: Any, cause: Exception) -> ConfigError:
    """One line for a constructor's ValueError/TypeError: `data.batch_size=0 must be >= 1
    (litforge_examples.data.digits.DigitsDataModule refused it)` when the message names one of the
    node's keys, else `path=target refused its arguments: message`."""
    name = node.get("_target_") if OmegaConf.is_dict(node) or isinstance(node, dict) else None
    message = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    key = re.match(r"(\w+)=", message)
    if key and key.group(1) in node:
        return ConfigError(f"{path}.{message} ({name} refused it)")
    return ConfigError(f"{path}={name} refused its arguments: {message}")


def check_optimizer(model: DictConfig, module: L.LightningModule) -> None:
    """`model.optimizer`, when it is a `_target_` partial, must build a torch.optim
    Optimizer on the module's parameters, and `model.scheduler` accept it (both built here
    once, before training, and thrown away)."""
    node = model.get("optimizer")
    if not (OmegaConf.is_dict(node) and "_target_" in node and node.get("_partial_")):
        return
    factory = construct(node, "model.optimizer")
    params = [p for p in module.parameters() if p.requires_grad]
    try:
        built = factory(params=params or [torch.nn.Parameter(torch.zeros(1))])
    except (ValueError, TypeError) as err:
        raise refusal("model.optimizer", node, err) from None
    if not isinstance(built, torch.optim.Optimizer):
        raise ConfigError(
            f"model.optimizer._target_={node._target_} built a {type(built).__name__}, not a "
            "torch.optim.Optimizer; name an optimizer class (torch.optim.SGD) or a function "
            "that returns one"
        )
    scheduler = model.get("scheduler")
    if OmegaConf.is_dict(scheduler) and "_target_" in scheduler and scheduler.get("_partial_"):
        try:
            construct(scheduler, "model.scheduler")(built)
        except ValueError as err:
            raise refusal("model.scheduler", scheduler, err) from None
        except TypeError:
            pass  # it takes arguments the module passes itself (total_steps, ...)


def _instantiate_each(group: DictConfig | None, name: str) -> list[Any]:
    """Each entry's object; a constructor's ConfigError (its own one-line check of its
    arguments) comes out as itself, not inside Hydra's InstantiationException."""
    if not group:
        return []
    objects = []
    for key, item in group.items():
        if item is None:
            continue
        try:
            built = instantiate(item, _convert_="all")
        except InstantiationException as err:
            if isinstance(err.__cause__, ConfigError):
                raise err.__cause__ from None
            extra = missing_extra(err)
            if extra is not None:  # e.g. Lightning's TensorBoardLogger without tensorboard
                raise ConfigError(f"{item.get('_target_')}: {extra}") from None
            raise
        if built is not None:  # None: a factory that is off for this run (auto_microbatch)
            console.info("built %s.%s <%s>", name, key, _class_name(built))
            objects.append(built)
    return objects


def build_callbacks(cfg: DictConfig) -> list[L.Callback]:
    return _instantiate_each(cfg.get("callbacks"), "callbacks")


def build_loggers(cfg: DictConfig) -> list[Any]:
    return _instantiate_each(cfg.get("logger"), "logger")


def build_trainer(
    cfg: DictConfig,
    extra_callbacks: Sequence[L.Callback] = (),
    datamodule: L.LightningDataModule | None = None,
    checkpoints: Any = None,
    **overrides: Any,
) -> L.Trainer:
    """Trainer(**cfg.trainer) with the configured callbacks and loggers (plus
    `extra_callbacks`), after checking the precision against the hardware; sets the
    precision's float32 matmul precision and, for 16-mixed on CUDA, its GradScaler.
    `datamodule` decides `use_distributed_sampler: null` (see conf/trainer/default.yaml)
    and is what the callbacks' `check_before_fit` look at; a training run's `checkpoints`
    (litforge.checkpointing.configure's) keep the tracked runs' ids beside them.

    `cfg.trainer` becomes the Trainer's arguments here. launch.processes is handed the
    process arguments (accelerator, devices, num_nodes, strategy) and no others; the
    precision's settings come from litforge.precision (tests/test_trainer_road.py traces
    the modules each value passes)."""
    kwargs = {key: _trainer_value(value) for key, value in cfg.trainer.items()}
    kwargs.update(overrides)
    if kwargs.get("use_distributed_sampler") is None:
        kwargs["use_distributed_sampler"] = not hooks.shards_itself(datamodule)
    # How many processes, how they meet and end: launch gets those arguments, no others.
    shape = {key: kwargs[key] for key in processes.KEYS if key in kwargs}
    processes.prepare(shape, ProcessSettings.of(cfg))
    kwargs.update(shape)
    requested = str(kwargs.get("precision", "32-true"))
    apply_matmul_precision(cfg)
    plugin = scaler_plugin(cfg, str(kwargs.get("accelerator", "auto")))
    if plugin is not None:  # 16-mixed on CUDA: our GradScaler settings
        plugins = kwargs.get("plugins") or []
        kwargs["plugins"] = [*(plugins if isinstance(plugins, list) else [plugins]), plugin]
        kwargs["precision"] = None  # Lightning refuses both; the plugin says 16-mixed
    with tracked_runs_beside(checkpoints, cfg):
        loggers = build_loggers(cfg)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    model.pop(FREEZE_KEY, None)  # type: ignore[union-attr]  # what builds it, nothing else
    record = ModelRecord(
        model,  # type: ignore[arg-type]
        OmegaConf.to_container(cfg.data, resolve=True),  # type: ignore[arg-type]
    )
    callbacks = [*build_callbacks(cfg), *extra_callbacks, record]
    # Lightning raises for both; the config stays composable with logger=none or
    # trainer.enable_progress_bar=false instead.
    if not loggers:
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    if kwargs.get("enable_progress_bar") is False:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=LIGHTNING_CPU_FP16_WARNING)
        trainer = L.Trainer(**kwargs, callbacks=callbacks, logger=loggers or False)
    console.info("built trainer <%s> (%s)", _class_name(trainer), _shape(trainer))
    check_hardware(requested, on_gpu=isinstance(trainer.accelerator, CUDAAccelerator))
    note = explain(requested, effective_precision(trainer))
    if note:
        console.warn(note)
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        check = hooks.check_before_fit_of(callback)
        if callable(check):
            check(trainer, datamodule)
    return trainer


@contextmanager
def tracked_runs_beside(checkpoints: Any, cfg: DictConfig) -> Iterator[None]:
    """Around building the loggers: a resumed run on a machine without its run directory
    gets its tracked runs' ids back from beside its checkpoints first, and a started one
    keeps them there after (the loggers write them as they start)."""
    if checkpoints is None:  # eval.py: no run to continue
        yield
        return
    run_dir = Path(cfg.run_dir)
    tracking.carry_ids(checkpoints, run_dir)
    yield
    tracking.keep_ids(checkpoints, run_dir)


def _class_name(built: Any) -> str:
    kind = type(built)
    return f"{kind.__module__}.{kind.__qualname__}"


def _shape(trainer: L.Trainer) -> str:
    strategy = type(trainer.strategy).__name__
    return (
        f"{trainer.num_nodes} node(s) x {trainer.num_devices} {type(trainer.accelerator).__name__}"
        f", {strategy}, precision {trainer.precision}"
    )


def _trainer_value(value: Any) -> Any:
    """A `{_target_: ...}` entry (a profiler, a strategy object) becomes that object."""
    if OmegaConf.is_dict(value) and "_target_" in value:
        return instantiate(value, _convert_="all")
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value
