"""Where did the step go: a bounded torch.profiler trace of a few training steps, read back
into one screen (litforge.monitors.step_breakdown_trace does the arithmetic).

Lightning names each hook it calls through `trainer.profiler` (`[Callback]X.on_train_batch_end`,
`[Strategy]X.training_step`, ...). `HookRanges` is that profiler: while the window records it
opens a torch.profiler range per hook, outside it does nothing, as Lightning's default
PassThroughProfiler does. Not Lightning's PyTorchProfiler: it profiles from the start, writes a
trace per stage and keeps its ranges open across the whole fit.

Lightning has no range around its loggers' writes or its own metric bookkeeping, so during the
window those methods are wrapped in one (instance attributes, removed when the window ends).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.profilers import PassThroughProfiler, Profiler
from lightning.pytorch.utilities import rank_zero_only
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from litforge import console, run_record
from litforge.errors import ConfigError
from litforge.monitors.step_breakdown_report import screen
from litforge.monitors.step_breakdown_settings import StepBreakdownSettings
from litforge.monitors.step_breakdown_trace import Breakdown, analyse

TRACE_DIR = "step_trace"


class HookRanges(Profiler):
    """Lightning's hook names as torch.profiler ranges, only while `recording`."""

    def __init__(self) -> None:
        super().__init__()
        self.recording = False
        self._open: dict[str, Any] = {}

    def start(self, action_name: str) -> None:
        if self.recording:
            ranged = record_function(action_name)
            ranged.__enter__()
            self._open[action_name] = ranged

    def stop(self, action_name: str) -> None:
        ranged = self._open.pop(action_name, None)
        if ranged is not None:
            ranged.__exit__(None, None, None)


def _ranged(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with record_function(name):
            return method(*args, **kwargs)

    return wrapper


class StepBreakdown(L.Callback):
    """wait_steps batches, then warmup_steps profiled and discarded, then active_steps batches
    recorded into `default_root_dir/step_trace/rank<N>.pt.trace.json` and printed as one
    screen; the figures go to `self.breakdown` and, in a litforge run, to run.json's
    `step_breakdown`."""

    def __init__(
        self,
        wait_steps: int = StepBreakdownSettings.wait_steps,
        warmup_steps: int = StepBreakdownSettings.warmup_steps,
        active_steps: int = StepBreakdownSettings.active_steps,
    ) -> None:
        settings = StepBreakdownSettings.checked(  # a bad value: one line naming its key
            wait_steps=wait_steps, warmup_steps=warmup_steps, active_steps=active_steps
        )
        self.settings = settings
        self.breakdown: Breakdown | None = None
        self.trace_path: Path | None = None
        self._ranges = HookRanges()
        self._previous: Profiler | None = None
        self._profiler: profile | None = None
        self._wrapped: list[tuple[Any, str]] = []
        self._batches = 0
        self._done = False

    def check_before_fit(self, trainer: L.Trainer, datamodule: Any) -> None:
        profiler = trainer.profiler
        if not isinstance(profiler, (PassThroughProfiler, HookRanges)):
            raise ConfigError(
                f"callbacks.step_breakdown names Lightning's hooks through trainer.profiler, "
                f"which is already {type(profiler).__name__} (debug=profiler?): use one of "
                "debug=profile and debug=profiler"
            )

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and trainer.profiler is not self._ranges:
            self.check_before_fit(trainer, None)
            self._previous, trainer.profiler = trainer.profiler, self._ranges
            self._batches = 0

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self._profiler is not None:
            self._profiler.step()  # ends a step here; after the last one, _ready has run
            if self._done:
                self._close(trainer)  # nothing of the profiler is left for later steps
        elif self._batches == self.settings.wait_steps and not self._done:
            self._start(trainer)
        self._batches += 1

    def _start(self, trainer: L.Trainer) -> None:
        activities = [ProfilerActivity.CPU]
        if trainer.strategy.root_device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        window = schedule(wait=0, warmup=self.settings.warmup_steps,
                          active=self.settings.active_steps, repeat=1)  # fmt: skip
        self._profiler = profile(activities=activities, schedule=window,
                                 on_trace_ready=lambda prof: self._ready(trainer, prof))  # fmt: skip
        self._profiler.start()
        self._ranges.recording = True
        self._wrap(trainer)

    def _wrap(self, trainer: L.Trainer) -> None:
        targets = [(logger, f"[Logger]{type(logger).__name__}") for logger in trainer.loggers]
        # Lightning's reduction of what self.log collected (a .item() per metric, the
        # device's sync on a GPU) runs in no hook of its own.
        targets.append((getattr(trainer, "_logger_connector", None), "[Lightning]logging"))
        for owner, label in targets:
            for method in ("log_metrics", "save", "update_train_step_metrics"):
                bound = getattr(owner, method, None) if owner is not None else None
                if callable(bound) and method not in vars(owner):
                    setattr(owner, method, _ranged(bound, f"{label}.{method}"))
                    self._wrapped.append((owner, method))

    def _finish(self) -> None:
        self._ranges.recording = False
        for owner, method in self._wrapped:
            delattr(owner, method)
        self._wrapped = []

    def _ready(self, trainer: L.Trainer, prof: profile) -> None:
        self._finish()
        self._done = True
        self.trace_path = (
            Path(trainer.default_root_dir) / TRACE_DIR / f"rank{trainer.global_rank}.pt.trace.json"
        )
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.trace_path))
        self.breakdown = analyse(json.loads(self.trace_path.read_text()), _callback_parts(trainer))
        if self.breakdown is not None:
            self._report(trainer, self.breakdown)

    @rank_zero_only
    def _report(self, trainer: L.Trainer, found: Breakdown) -> None:
        assert self.trace_path is not None
        console.info("%s", screen(found, self.trace_path, _facts(trainer)))
        root = Path(trainer.default_root_dir)
        if (root / "run.json").exists():  # a litforge run's; a plain Trainer's root gets none
            record = {**found.record(), "trace": str(self.trace_path)}
            run_record.update(root, step_breakdown=record)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._profiler is not None and not self._done:
            console.warn(
                "step breakdown: training ended after %d batches, before its window (%d "
                "waited + %d warm-up + %d recorded); lower callbacks.step_breakdown.wait_steps "
                "or train longer", self._batches, self.settings.wait_steps,
                self.settings.warmup_steps, self.settings.active_steps,
            )  # fmt: skip
            self._finish()
        self._close(trainer)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, err: BaseException
    ) -> None:
        self._finish()
        self._close(trainer)

    def _close(self, trainer: L.Trainer) -> None:
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            profiler.on_trace_ready = None  # a partial window is not a breakdown
            profiler.stop()
        if self._previous is not None and trainer.profiler is self._ranges:
            trainer.profiler = self._previous


def _callback_parts(trainer: L.Trainer) -> dict[str, tuple[str, str]]:
    """Each callback's `state_key` (what Lightning names its hooks by) -> (category, label)."""
    return {
        callback.state_key: (
            "checkpoint" if isinstance(callback, Checkpoint) else "callbacks",
            type(callback).__name__,
        )  # fmt: skip
        for callback in trainer.callbacks  # type: ignore[attr-defined]
    }


def _facts(trainer: L.Trainer) -> dict[str, Any]:
    """What the advice quotes: the train loader's settings, the logging interval, and the
    config key of each callback class (from the run's config.yaml, where litforge wrote one)."""
    loader = trainer.train_dataloader
    settings = ", ".join(f"{name}={getattr(loader, name, '?')}"
                         for name in ("num_workers", "pin_memory", "persistent_workers"))  # fmt: skip
    return {
        "loader": settings,
        "log_every_n_steps": trainer.log_every_n_steps,
        "callback_keys": _callback_keys(Path(trainer.default_root_dir) / "config.yaml"),
    }


def _callback_keys(config: Path) -> dict[str, str]:
    try:
        import yaml

        callbacks = (yaml.safe_load(config.read_text()) or {}).get("callbacks") or {}
    except (OSError, ValueError, AttributeError, ImportError):
        return {}
    return {
        str(node["_target_"]).rsplit(".", 1)[-1]: name
        for name, node in callbacks.items()
        if isinstance(node, dict) and "_target_" in node
    }
