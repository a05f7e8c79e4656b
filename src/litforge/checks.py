"""Config checks that run before anything is built, so bad input never starts training."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from litforge.errors import ConfigError
from litforge.precision import check_name


def _positive_int(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}={value} is invalid; must be an integer >= 1")


def _check_devices(value: Any) -> None:
    """Lightning's forms: a count >= 1, -1 or 'auto', a list of ids, or '0,1'."""
    if value in ("auto", -1):
        return
    ids = OmegaConf.to_container(value) if OmegaConf.is_list(value) else value
    if isinstance(ids, str):
        ids = [int(i) if i.strip().isdigit() else i for i in ids.split(",") if i.strip()]
        if len(ids) == 1 and isinstance(ids[0], int):
            ids = ids[0]  # "2" means two devices, as in Lightning
    if isinstance(ids, list) and ids and all(isinstance(i, int) and i >= 0 for i in ids):
        return
    if isinstance(ids, int) and not isinstance(ids, bool) and ids >= 1:
        return
    raise ConfigError(
        f"trainer.devices={value} is invalid; must be an integer >= 1, a list of device ids, "
        "or 'auto'"
    )


def _positive_number(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{key}={value} is invalid; must be a number > 0")


def check_config(cfg: DictConfig) -> None:
    """Raise ConfigError naming the first bad key; covers the values people mistype."""
    _check_resolves(cfg)
    trainer = cfg.trainer
    _check_trainer_keys(trainer)
    check_name(trainer.get("precision", "32"))
    _check_devices(trainer.get("devices", "auto"))
    _positive_int(trainer.get("accumulate_grad_batches", 1), "trainer.accumulate_grad_batches")
    _positive_int(trainer.get("num_nodes", 1), "trainer.num_nodes")
    _positive_int(cfg.data.get("batch_size", 1), "data.batch_size")
    if cfg.data.get("num_workers", 0) < 0:
        raise ConfigError(f"data.num_workers={cfg.data.num_workers} is invalid; must be >= 0")
    optimizer = cfg.model.get("optimizer") or {}
    if "lr" in optimizer:
        _positive_number(optimizer.lr, "model.optimizer.lr")
    if optimizer.get("weight_decay", 0) < 0:
        raise ConfigError(f"model.optimizer.weight_decay={optimizer.weight_decay} must be >= 0")
    _check_something_to_rank(cfg)
    accelerator = str(trainer.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"trainer.accelerator={accelerator} but no CUDA GPU is visible; "
                "use trainer=cpu (or trainer=default, which picks what is there)"
            )


def _check_something_to_rank(cfg: DictConfig) -> None:
    """A run must train, and validate when checkpoints are ranked by a validation metric."""
    trainer = cfg.trainer
    if trainer.get("max_steps", -1) == 0:
        raise ConfigError(
            "trainer.max_steps=0 trains nothing; use -1 (bounded by max_epochs) or >= 1"
        )
    monitor = (cfg.get("checkpoint") or {}).get("monitor")
    limit = trainer.get("limit_val_batches")
    if monitor and str(monitor).startswith("val/") and limit is not None and limit == 0:
        raise ConfigError(
            f"trainer.limit_val_batches={limit} runs no validation, but checkpoints are ranked "
            f"by checkpoint.monitor={monitor}; allow validation, or set checkpoint.monitor=null "
            "to keep the newest checkpoints only"
        )


def _check_resolves(cfg: DictConfig) -> None:
    """Every ${...} must resolve: a dangling one means two groups that do not fit."""
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except InterpolationResolutionError as err:
        raise ConfigError(
            f"{err.full_key}: {str(err).splitlines()[0]}. The selected config groups do not fit together "
            "(model=gpt reads block_size from data=text: use experiment=gpt_char)"
        ) from err


def _check_trainer_keys(trainer: DictConfig) -> None:
    import inspect

    import lightning as L

    valid = set(inspect.signature(L.Trainer.__init__).parameters) - {"self", "callbacks", "logger"}
    unknown = sorted(set(trainer) - valid)
    if unknown:
        raise ConfigError(
            f"trainer.{unknown[0]} is not an argument of lightning.Trainer "
            "(callbacks and loggers come from the callbacks= and logger= groups)"
        )
