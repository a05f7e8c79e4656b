"""Config checks that run before anything is built, so bad input never starts training.

litforge's own keys have their types, ranges and the rules that span them in their groups'
schemas (litforge.settings; `validation.schema.RULES` gathers them with the Trainer's); the
user's groups are checked against the signatures of the `_target_`s they name
(`litforge.validation.targets`); the checks here look at the user's classes, the Trainer's
signature, the loggers' directories and the machine.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    InterpolationKeyError,
    InterpolationResolutionError,
    MissingMandatoryValue,
)

from litforge import hooks
from litforge.errors import ConfigError
from litforge.paths import unwritable
from litforge.settings import all_schemas
from litforge.validation import schema, targets


def check_config(cfg: DictConfig) -> None:
    """Raise ConfigError naming the first bad key, the value given and what is valid."""
    plain = _resolved(cfg)
    for settings in all_schemas():  # rules that span keys live with their group's schema
        settings.check_across(plain)
    _check_trainer_keys(plain["trainer"])
    for key, value, reason in schema.problems(plain):
        raise ConfigError(f"{key}={_show(value)} is invalid; {reason}")
    check_targets(plain)
    _check_logger_dirs(plain)
    _check_model_fits_data(plain)
    accelerator = str(plain["trainer"].get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"trainer.accelerator={accelerator} but no CUDA GPU is visible; "
                "use trainer=cpu (or trainer=default, which picks what is there)"
            )


def check_targets(plain: dict[str, Any]) -> None:
    """Every `_target_` node of the user's groups against its signature; the model's
    optimizer and scheduler must be partials (the module calls them)."""
    for group in ("data", "model"):
        if not isinstance(plain.get(group), dict) or "_target_" not in plain[group]:
            raise ConfigError(
                f"{group} has no _target_: pick a {group}= option or give "
                f"{group}._target_=your_package.YourClass"
            )
    targets.require_partial(plain["model"].get("optimizer"), "model.optimizer", "the parameters")
    targets.require_partial(plain["model"].get("scheduler"), "model.scheduler", "the optimizer")
    for group, example in (("callbacks", "'callbacks=[default,NAME]'"), ("logger", "logger=NAME")):
        _check_entries_have_targets(group, plain.get(group), example)
    model = {k: v for k, v in plain["model"].items() if k != "freeze"}  # litforge's own key
    for group, tree in (("data", plain.get("data")), ("model", model),
                        ("callbacks", plain.get("callbacks")), ("logger", plain.get("logger"))):  # fmt: skip
        targets.check_tree(tree, group)


def _check_entries_have_targets(group: str, entries: Any, example: str) -> None:
    """An entry of the callbacks or logger group with keys but no `_target_` is what an
    experiment leaves when it sets `logger.mlflow.experiment_name` while no mlflow logger
    is selected: Hydra would build it as a plain dict, which Lightning fails on deep
    inside the Trainer."""
    for name, node in (entries or {}).items():
        if isinstance(node, dict) and "_target_" not in node:
            keys = ", ".join(sorted(node)) or "nothing"
            options = _group_options(group)
            if options is not None and str(name) not in options:
                # lightning-hydra-template's `logger.aim.experiment` with no aim option:
                # "select it" would send the user to an option that does not exist.
                raise ConfigError(
                    f"{group}.{name} sets {keys} but has no _target_, and {group} has no "
                    f"option {name} ({', '.join(options)}): remove the block, or give "
                    f"{group}.{name}._target_=package.Class"
                )
            raise ConfigError(
                f"{group}.{name} sets {keys} but has no _target_, so nothing would be built "
                f"from it: select it ({example.replace('NAME', str(name))}), or give "
                f"{group}.{name}._target_=package.Class"
            )


def _group_options(group: str) -> list[str] | None:
    """The options of `group` on this job's search path (conf/, litforge's, hydra.searchpath);
    None outside a Hydra job (compose() in a notebook), where Hydra cannot be asked."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException

    if not (HydraConfig.initialized() and GlobalHydra.instance().is_initialized()):
        return None
    job = HydraConfig.get()
    try:
        return sorted(set(GlobalHydra.instance().config_loader().get_group_options(
            group, config_name=job.job.config_name, overrides=list(job.overrides.task))))  # fmt: skip
    except HydraException:
        return None


def _check_logger_dirs(plain: dict[str, Any]) -> None:
    """A logger's `save_dir` it cannot write would fail at its first write, mid-start."""
    for name, node in (plain.get("logger") or {}).items():
        save_dir = node.get("save_dir") if isinstance(node, dict) else None
        if isinstance(save_dir, str) and "://" not in save_dir:
            problem = unwritable(Path(save_dir))
            if problem:
                raise ConfigError(
                    f"logger.{name}.save_dir={save_dir}: cannot write there ({problem}); "
                    "give a directory this user may write to"
                )


def _show(value: Any) -> str:
    return "''" if value == "" else str(value)


def _resolved(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain values; a dangling ${...} or a required key left out is an error."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except MissingMandatoryValue as err:
        key = err.full_key
        raise ConfigError(f"{key} is required and has no default; pass {key}=...") from err
    except InterpolationResolutionError as err:
        text = str(err).splitlines()[0]
        missing_env = re.search(r"Environment variable '([^']+)' not found", text)
        if missing_env:
            var = missing_env.group(1)
            raise ConfigError(
                f"{err.full_key} reads the environment variable {var}, which is not set; "
                f"export {var}=... or give {err.full_key}=... directly"
            ) from err
        if isinstance(err, InterpolationKeyError):
            raise ConfigError(
                f"{err.full_key}: {text}. The selected config groups do not fit together "
                "(model=gpt reads block_size from data=text: use experiment=gpt_char)"
            ) from err
        raise ConfigError(f"{err.full_key}: {text}") from err


def _check_trainer_keys(trainer: dict[str, Any]) -> None:
    import lightning as L

    valid = set(inspect.signature(L.Trainer.__init__).parameters) - {"self", "callbacks", "logger"}
    unknown = sorted(set(trainer) - valid)
    if unknown:
        raise ConfigError(
            f"trainer.{unknown[0]} is not an argument of lightning.Trainer "
            "(callbacks and loggers come from the callbacks= and logger= groups)"
        )


def _check_model_fits_data(cfg: dict[str, Any]) -> None:
    """A model declares the batches it consumes, a DataModule those it provides."""
    model, data = _class_of(cfg["model"], "model"), _class_of(cfg["data"], "data")
    consumes, provides = hooks.consumes_of(model), hooks.provides_of(data)
    if consumes and provides and consumes != provides:
        raise ConfigError(
            f"model={model.__name__} takes {consumes} but data={data.__name__} gives {provides}; "
            "pick a matching pair, e.g. experiment=gpt_char or experiment=digits_cnn"
        )


def _class_of(node: dict[str, Any], key: str) -> Any:
    return targets.locate(node, key)
