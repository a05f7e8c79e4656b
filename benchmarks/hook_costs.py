"""Figures `hook_share_cnn`, `hook_share_gpt` and `hook_share_wandb`: what each default
callback, and the logger, costs per step, accounted inside the run.

`HookTimer` wraps every hook each other callback overrides, and the loggers' calls, on
their instances and adds up the CPU time (of the training thread) spent in each, exclusive
of nested timed calls (a callback that logs charges the logger's part to the logger). A
figure is that time over the process's CPU time, both counted from the end of the first
optimizer step to the end of the last: per step, with start-up, first-step work (the
FLOP count) and the end of fit left out, and each epoch's validation in proportion.
Checkpoint saves (`StoreCheckpoint.save`, at the experiment's schedule: every digits epoch)
are counted apart from the per-step hooks, as `checkpoint saves`. Steadier
than an A/B ratio of two runs (which spreads about +-15% on a shared machine), though
blind to Lightning's cost of calling the hooks. What the timing itself adds to a call (two
clock reads, ~0.5 us each on this machine, measured at start) is subtracted per call.
Per callback in each figure's `extra`.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L

from benchmarks.overhead import MODELS, template_runner
from benchmarks.stats import Figure
from litforge.checkpointing.callback import StoreCheckpoint

TIMER = "+callbacks.hook_timer._target_=benchmarks.hook_costs.HookTimer"
HOOKS = sorted(
    name for name in vars(L.Callback) if name.startswith("on_") or name in ("setup", "teardown")
)
# Windows of whole digits epochs (8 ends after step 1); gpt_char validates at 200.
STEPS = {"cnn": 8 * 19 + 1, "gpt": 13}
SAVES = "checkpoint saves"
LOGGER_CALLS = ("log_metrics", "log_hyperparams", "save", "after_save_checkpoint", "finalize")


class HookTimer(L.Callback):
    """Adds up, per callback (and per logger), the CPU time spent inside its hooks."""

    spent: dict[str, float] = {}  # label -> seconds since the first step ended
    calls: dict[str, int] = {}  # label -> timed calls since then
    per_call = 0.0  # what timing one call adds (two clock reads: ~0.5 us each here)
    shares: dict[str, float] = {}  # label -> share of the process's CPU time, at train end
    _stack: list[list[Any]] = []  # [label, start] of the timed calls in progress
    _cpu_start: float | None = None

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        # The window opens and closes at this hook each time: callbacks listed after this
        # one have their hooks of the first batch inside it and of the last outside (a wash).
        if HookTimer._cpu_start is None and trainer.global_step >= 1:
            HookTimer.spent, HookTimer.calls = {}, {}
            HookTimer._cpu_start = time.process_time()
        elif HookTimer._cpu_start is not None and trainer.global_step >= trainer.max_steps:
            cpu = time.process_time() - HookTimer._cpu_start
            cost = HookTimer.per_call
            HookTimer.shares = {
                label: max(0.0, spent - cost * HookTimer.calls[label]) / cpu
                for label, spent in HookTimer.spent.items()
            }
            HookTimer._cpu_start = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if getattr(self, "_wrapped", False):
            return
        self._wrapped = True
        HookTimer.per_call = _timer_cost()
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            if callback is self:
                continue
            for name in HOOKS:
                if getattr(type(callback), name, None) is not getattr(L.Callback, name):
                    setattr(callback, name, _timed(getattr(callback, name), type(callback)))
            if isinstance(callback, StoreCheckpoint):
                callback.save = _Exclusive(callback.save, SAVES)  # type: ignore[method-assign]
        for logger in trainer.loggers:
            for name in LOGGER_CALLS:
                if hasattr(logger, name):
                    setattr(logger, name, _timed(getattr(logger, name), type(logger), "logger "))


def _timed(call: Callable[..., Any], owner: type, prefix: str = "") -> _Exclusive:
    return _Exclusive(call, prefix + owner.__name__)


class _Exclusive:
    """A timed stand-in for one bound hook: exclusive CPU time into HookTimer.spent."""

    def __init__(self, call: Callable[..., Any], label: str) -> None:
        self.call, self.label = call, label

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stack, spent = HookTimer._stack, HookTimer.spent
        now = time.thread_time()
        if stack:  # the outer call pauses while this one runs
            outer = stack[-1]
            spent[outer[0]] = spent.get(outer[0], 0.0) + now - outer[1]
        stack.append([self.label, now])
        HookTimer.calls[self.label] = HookTimer.calls.get(self.label, 0) + 1
        try:
            return self.call(*args, **kwargs)
        finally:
            now = time.thread_time()
            label, start = stack.pop()
            spent[label] = spent.get(label, 0.0) + now - start
            if stack:
                stack[-1][1] = now


def _timer_cost(calls: int = 2000) -> float:
    """Seconds the timing adds to one call: an empty call timed, less the same untimed."""
    saved = HookTimer.spent, HookTimer.calls, HookTimer._stack
    HookTimer.spent, HookTimer.calls, HookTimer._stack = {}, {}, []
    empty = _Exclusive(lambda: None, "calibration")
    for _ in range(calls):
        empty()
    cost = HookTimer.spent["calibration"] / calls
    HookTimer.spent, HookTimer.calls, HookTimer._stack = saved
    return cost


def shares(overrides: list[str], steps: int, repeats: int) -> dict[str, list[float]]:
    """label -> per-repeat share of the run's CPU time."""
    dirs: list[Path] = []
    run = template_runner([*overrides, TIMER], dirs)
    run(2)  # warm-up: imports and first calls
    found: dict[str, list[float]] = {}
    for _ in range(repeats):
        run(steps)
        for label, share in HookTimer.shares.items():
            found.setdefault(label, []).append(share)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    return found


def _figure(found: dict[str, list[float]], labels: list[str], goal: str | None, note: str):
    repeats = len(next(iter(found.values())))
    total = [sum(found[label][i] for label in labels) for i in range(repeats)]
    each = {label: round(statistics.median(v), 5) for label, v in sorted(found.items())
            if max(v) >= 5e-5}  # fmt: skip
    return Figure.of(total, "of step CPU", goal, note=note, extra={"shares": each})


def measure(repeats: int = 3) -> dict[str, Figure]:
    figures = {}
    for model, goal in (("cnn", "<= 0.02"), ("gpt", "<= 0.01")):
        found = shares(MODELS[model]["overrides"], STEPS[model], repeats)
        hooks = [label for label in found if not label.startswith("logger ") and label != SAVES]
        figures[f"hook_share_{model}"] = _figure(
            found, hooks, goal, f"{model}: CPU time in the default callbacks' per-step hooks"
        )
        if model == "cnn":
            figures["checkpoint_save_share_cnn"] = _figure(
                found, [SAVES], None, "cnn: CPU time of the checkpoint saved every epoch"
            )
    wandb = ["experiment=digits_cnn", "logger=wandb", "logger.wandb.mode=offline"]
    found = shares(wandb, STEPS["cnn"], repeats)
    loggers = [label for label in found if label.startswith("logger ")]
    figures["hook_share_wandb"] = _figure(
        found, loggers, "<= 0.02", "cnn, logger=wandb offline: CPU time in the logger's calls"
    )
    return figures
