"""Starting from another run's checkpoint: `restore.mode=finetune | hotstart | continue`
with `restore.from=CKPT_OR_URL` (grok-ai/nn-template's restore modes, by name).

- finetune: the weights only; a new optimizer, schedule and step 0.
- hotstart: the weights and the optimizer's state (its moments), a new schedule, step 0.
- continue: the whole training state, as a resume (`ckpt_path=`).

A restore applies when a run starts with no checkpoint of its own: once the run has saved
one, the same command resumes from that (a preempted fine-tune goes on, it does not start
over). Weights that do not fit (missing or unexpected names, other shapes) are one block
naming them; `restore.strict=false` loads what fits and says what it left. `model.freeze`
(name patterns) freezes parameters; see `litforge.checkpointing.freezing`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from litforge import console
from litforge.checkpointing import checkpoint_file
from litforge.checkpointing.model_record import RECORD_KEY
from litforge.checkpointing.settings import RestoreSettings
from litforge.errors import ConfigError
from litforge.run_settings import ResumeSettings

MODES = ("finetune", "hotstart", "continue")
SHOWN = 8  # names listed per kind of mismatch


@dataclass(frozen=True)
class Restore:
    mode: str
    source: str  # restore.from, as given
    local: Path  # the checkpoint, fetched
    strict: bool = True


def requested(cfg: DictConfig) -> tuple[str, str, bool] | None:
    """(mode, from, strict) of `cfg.restore`; None when neither mode nor from is set."""
    asked = RestoreSettings.of(cfg)  # restore.mode's values: its rule, one line
    if asked.mode is None:
        if asked.from_:
            raise ConfigError(
                f"restore.from={asked.from_} needs restore.mode={' | '.join(MODES)} (its "
                "weights | its weights and optimizer state | its whole training state); "
                "without restore.mode it would be ignored"
            )
        return None
    if not asked.from_:
        raise ConfigError(
            f"restore.mode={asked.mode} needs restore.from=CHECKPOINT (a file or URL)"
        )
    explicit = ResumeSettings.of(cfg).ckpt_path
    if explicit:
        raise ConfigError(
            f"restore.mode={asked.mode} and ckpt_path={explicit} both name where to start; "
            "keep one (ckpt_path= is restore.mode=continue)"
        )
    return str(asked.mode), str(asked.from_), asked.strict


def fetch(cfg: DictConfig, mode: str, source: str, strict: bool, staging: Path) -> Restore:
    """The checkpoint of `restore.from`, fetched and checked to be of the configured model."""
    what = f"restore.from={source}"
    with named():
        local = checkpoint_file.fetch(source, staging)
        checkpoint = checkpoint_file.load(str(local), mmap=True, verify=True)
    if mode == "hotstart" and local.is_dir():
        raise ConfigError(
            f"restore.mode=hotstart: {what} is a sharded checkpoint (trainer=fsdp), whose "
            "optimizer state is sharded too; use restore.mode=finetune or continue"
        )
    same_model(checkpoint, OmegaConf.to_container(cfg.model, resolve=True), what)  # type: ignore[arg-type]
    console.info("restore.mode=%s from %s: %s", mode, source, {
        "finetune": "its weights; a new optimizer, schedule and step 0",
        "hotstart": "its weights and optimizer state; a new schedule and step 0",
        "continue": "the whole training state",
    }[mode])  # fmt: skip
    return Restore(mode, source, local, strict)


@contextmanager
def named() -> Iterator[None]:
    """Errors about the checkpoint file name the key it came from, restore.from, not
    ckpt_path (checkpoint_file's name for it)."""
    try:
        yield
    except ConfigError as err:
        message = str(err)
        if not message.startswith("ckpt_path="):
            raise
        raise ConfigError("restore.from=" + message.removeprefix("ckpt_path=")) from None


def same_model(checkpoint: dict[str, Any], configured: dict[str, Any], what: str) -> None:
    """The same model class and net class (their settings may differ: a new head)."""
    saved = checkpoint.get(RECORD_KEY)
    if not isinstance(saved, dict):
        return  # not written by litforge: the weights' names decide
    for key, name in (("_target_", "model"), ("net", "model.net")):
        old, new = _class_of(saved, key), _class_of(configured, key)
        if old != new:
            raise ConfigError(
                f"{what} is a checkpoint of {name}={old}, but this run's {name} is {new}; "
                "restore from a checkpoint of the same model"
            )


def _class_of(model: dict[str, Any], key: str) -> Any:
    """The model's `_target_` (key `_target_`), or its net's (key `net`; None without one)."""
    value = model.get(key)
    if key != "net":
        return value
    return value.get("_target_") if isinstance(value, dict) else None


def load_weights(module: torch.nn.Module, restore: Restore) -> None:
    """The checkpoint's weights into `module`: what does not fit is one block (an error, or
    with restore.strict=false a warning after loading the rest)."""
    if restore.local.is_dir():
        state = checkpoint_file.sharded_weights(restore.local)
    else:
        state = checkpoint_file.load(str(restore.local), mmap=True)["state_dict"]
    own = module.state_dict()
    reshaped = [k for k, v in state.items() if k in own and tuple(v.shape) != tuple(own[k].shape)]
    shapes = [f"{k} {tuple(state[k].shape)} -> {tuple(own[k].shape)}" for k in reshaped]
    fitting = {k: v for k, v in state.items() if k in own and k not in reshaped}
    result = module.load_state_dict(fitting, strict=False)
    missing = [k for k in result.missing_keys if k not in reshaped]
    unexpected = [k for k in state if k not in own]
    if not (missing or unexpected or shapes):
        return
    block = [f"restore.from={restore.source}: {len(fitting)} of {len(own)} weights loaded"]
    for label, names in (("missing (kept as initialised)", missing),
                         ("unexpected (not in this model)", unexpected),
                         ("other shapes (kept as initialised)", shapes)):  # fmt: skip
        if names:
            more = f", and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
            block.append(f"  {label}: {', '.join(names[:SHOWN])}{more}")
    if restore.strict:
        block.append("  set restore.strict=false to train with what fits")
        raise ConfigError("\n".join(block))
    console.warn("\n".join(block))


class HotStart(L.Callback):
    """Puts the checkpoint's optimizer state (moments, step counts) into the new optimizer,
    keeping the new one's hyperparameters (learning rate, schedule) as configured."""

    def __init__(self, restore: Restore) -> None:
        self.restore = restore

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        saved = (
            checkpoint_file.load(str(self.restore.local), mmap=True).get("optimizer_states") or []
        )
        if len(saved) != len(trainer.optimizers):
            raise ConfigError(
                f"restore.mode=hotstart: restore.from={self.restore.source} holds "
                f"{len(saved)} optimizer states, this run has {len(trainer.optimizers)}; use "
                "restore.mode=finetune"
            )
        for optimizer, old in zip(trainer.optimizers, saved, strict=True):
            new = optimizer.state_dict()
            old_sizes = [len(g["params"]) for g in old["param_groups"]]
            new_sizes = [len(g["params"]) for g in new["param_groups"]]
            if old_sizes != new_sizes:
                raise ConfigError(
                    f"restore.mode=hotstart: restore.from={self.restore.source}'s optimizer has "
                    f"parameter groups of {old_sizes} tensors, this run's {new_sizes} (another "
                    "model or freeze); use restore.mode=finetune"
                )
            optimizer.load_state_dict({"state": old["state"], "param_groups": new["param_groups"]})
