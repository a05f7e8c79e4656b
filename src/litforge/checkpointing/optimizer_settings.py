"""A resume with other optimizer or schedule settings than its checkpoint's.

Lightning restores the optimizer and LR scheduler exactly as saved, so a resumed run with
`model.optimizer.lr=5e-4` (trained with 3e-3) would go on with the old learning rate and
never say so. This callback compares the run's `model.optimizer` and `model.scheduler`
with the checkpoint's own (its `litforge_model` record) and never stays silent:

- a changed setting the restored objects hold (a parameter group's lr, weight_decay,
  betas, momentum, ...; a scheduler attribute such as StepLR's gamma) is applied to them
  after Lightning restored them, from the values the run's config builds (so an optimizer
  factory's per-group values, such as no weight decay on biases, are kept), with one line;
  a new learning rate moves the schedule too (initial_lr, the scheduler's base_lrs);
- a changed `warmup_steps` of a LambdaLR-style schedule needs nothing: its function is the
  run's own (not saved in checkpoints); said in the same line;
- what cannot be applied (another optimizer or scheduler class, a key neither holds) is
  one line before training.
"""

from __future__ import annotations

import copy
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from torch.optim.lr_scheduler import LambdaLR, MultiplicativeLR

from litforge import console
from litforge.checkpointing.model_record import RECORD_KEY, model_config
from litforge.errors import ConfigError

PARTS = ("optimizer", "scheduler")
# What a scheduler's state_dict holds about its progress, not its settings.
_PROGRESS = {"base_lrs", "last_epoch", "_step_count", "_last_lr", "_get_lr_called_within_step",
             "verbose", "lr_lambdas", "optimizer"}  # fmt: skip


def changes(saved: dict[str, Any], configured: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """`model.optimizer.KEY` / `model.scheduler.KEY` -> (checkpoint's, run's) for each
    setting that differs; a part set in one and null in the other is its `_target_`."""
    found = {}
    for part in PARTS:
        old, new = saved.get(part), configured.get(part)
        if not isinstance(old, dict) or not isinstance(new, dict):
            if old != new:
                found[f"model.{part}._target_"] = (_target(old), _target(new))
            continue
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                found[f"model.{part}.{key}"] = (old.get(key), new.get(key))
    return found


def _target(node: Any) -> Any:
    return node.get("_target_") if isinstance(node, dict) else node


class OptimizerSettings(L.Callback):
    """On resume: the run's optimizer and schedule settings, applied or refused."""

    def __init__(self) -> None:
        self._changed: dict[str, tuple[Any, Any]] | None = None  # None: not resumed
        self._fresh: list[list[dict[str, Any]]] | None = None  # the run's own param groups
        self._fresh_schedulers: list[dict[str, Any]] = []

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return  # trainer.test(ckpt_path=...) loads callbacks too
        saved, configured = checkpoint.get(RECORD_KEY), model_config(trainer)
        if configured is None:
            return
        if not isinstance(saved, dict):
            console.info("the checkpoint has no litforge_model record to compare with: its "
                         "optimizer and LR schedule settings are restored as saved")  # fmt: skip
            return
        self._changed = changes(saved, configured)
        classes = {
            k: v for k, v in self._changed.items() if k.endswith(("._target_", "._partial_"))
        }
        if classes:
            raise ConfigError(_refusal(classes, "another class keeps no state of the old one"))
        self._check(trainer)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The optimizers and schedulers as the run's config built them; Lightning loads
        # the checkpoint's state into them after this hook.
        self._fresh = [
            [{k: copy.deepcopy(v) for k, v in group.items() if k != "params"}
             for group in optimizer.param_groups]
            for optimizer in trainer.optimizers
        ]  # fmt: skip
        self._fresh_schedulers = [copy.deepcopy(c.scheduler.state_dict())
                                  for c in trainer.lr_scheduler_configs]  # fmt: skip
        self._check(trainer)

    def _check(self, trainer: L.Trainer) -> None:
        """Once both the changes and the fresh objects are known (their order depends on the
        strategy): refuse what cannot be applied, before any step."""
        if not self._changed or self._fresh is None:
            return
        groups = [g for groups in self._fresh for g in groups]
        stray = {}
        for name, values in self._changed.items():
            part, key = name.split(".")[1:]
            if part == "optimizer":
                held = bool(groups) and all(key in g for g in groups)
            else:
                held = any(self._holds(state, key) for state in self._fresh_schedulers)
            if not held:
                stray[name] = values
        if stray:
            raise ConfigError(_refusal(stray, "the restored optimizer and schedule hold no such "
                                              "setting to change"))  # fmt: skip

    @staticmethod
    def _holds(state: dict[str, Any], key: str) -> bool:
        if key in state and key not in _PROGRESS:
            return True
        lambdas = state.get("lr_lambdas")  # functions are not saved: the run's own applies
        return lambdas is not None and all(fn is None for fn in lambdas)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._changed or self._fresh is None:
            return
        keys = {name.split(".")[2] for name in self._changed if name.startswith("model.opt")}
        for optimizer, fresh in zip(trainer.optimizers, self._fresh, strict=True):
            schedulers = [c.scheduler for c in trainer.lr_scheduler_configs
                          if c.scheduler.optimizer is optimizer]  # fmt: skip
            for index, (group, new) in enumerate(zip(optimizer.param_groups, fresh, strict=True)):
                for key in keys - {"lr"}:
                    group[key] = copy.deepcopy(new[key])
                if "lr" in keys:
                    _set_base_lr(group, new, schedulers, index)
        for config, fresh in zip(trainer.lr_scheduler_configs, self._fresh_schedulers,
                                 strict=True):  # fmt: skip
            scheduler = config.scheduler
            for name in self._changed:
                key = name.split(".")[2]
                if name.startswith("model.sch") and key in fresh and key not in _PROGRESS:
                    setattr(scheduler, key, copy.deepcopy(fresh[key]))
            if isinstance(scheduler, LambdaLR) and not isinstance(scheduler, MultiplicativeLR):
                # Closed form: the lr this step has under the run's own schedule.
                for group, base, fn in zip(scheduler.optimizer.param_groups, scheduler.base_lrs,
                                           scheduler.lr_lambdas, strict=True):  # fmt: skip
                    group["lr"] = base * fn(scheduler.last_epoch)
            scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
        console.info("; ".join(f"{name} {old} -> {new} from step {trainer.global_step}"
                               for name, (old, new) in self._changed.items()))  # fmt: skip


def _set_base_lr(
    group: dict[str, Any], new: dict[str, Any], schedulers: list[Any], index: int
) -> None:
    """The group's learning rate from the run's config; where a schedule drives it, its
    base (initial_lr, base_lrs), and the current lr scaled by new base / old base."""
    base = new.get("initial_lr", new["lr"])
    old = group.get("initial_lr", group["lr"])
    if "initial_lr" in group:
        group["initial_lr"] = base
    group["lr"] = group["lr"] * base / old if old else base
    for scheduler in schedulers:
        scheduler.base_lrs[index] = base


def _refusal(found: dict[str, tuple[Any, Any]], why: str) -> str:
    listed = ", ".join(f"{name} {old} -> {new}" for name, (old, new) in found.items())
    undo = " ".join(f"{name}={old}" for name, (old, _) in found.items())
    return (
        f"resuming with {listed}: cannot be applied to the checkpoint's optimizer and "
        f"schedule ({why}); resume with {undo}, or start a new run from its weights "
        "(restore.mode=finetune restore.from=CHECKPOINT)"
    )
