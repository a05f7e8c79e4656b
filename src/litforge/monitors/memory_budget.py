"""The memory budget at the start of fit, a stop when it cannot fit, and a GPU check.

Settings: memory_budget_settings.py (conf/callbacks/memory_budget.yaml is generated from
it); the figures are `python -m litforge.budget`'s.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import WeightAveraging
from lightning.pytorch.utilities.model_helpers import is_overridden

from litforge import console
from litforge.checkpointing.model_record import model_config
from litforge.errors import ConfigError
from litforge.launch.fsdp import is_sharded
from litforge.launch.settings import ProcessSettings
from litforge.monitors import out_of_memory as oom
from litforge.monitors.memory_budget_settings import MemoryBudgetSettings
from litforge.planning.budget import report
from litforge.planning.budget.estimate import device_limit, subject_of
from litforge.planning.budget.failure import describe
from litforge.planning.budget.measure import Row
from litforge.planning.hardware import available_ram
from litforge.precision.fp8.training import describe as float8_layers

KEY = MemoryBudgetSettings.GROUP
log = logging.getLogger(__name__)


class MemoryBudgetExceeded(ConfigError):
    """The configured setting needs more memory than the device has."""


class MemoryBudget(L.Callback):
    """At fit setup, before the module moves to its device: estimate this run's memory
    (weights, gradients, optimizer state, activations), log it, and stop with the options
    to try when it exceeds the device's memory. On a GPU, after `compare_after_steps`
    optimizer steps, log the estimate next to `torch.cuda.max_memory_allocated()`.

    device_memory: the memory to fit in ("80GiB", "24GB", bytes, or a card name such as
        H100); None: the GPU's own, and no limit on CPU.
    enforce: stop before training when the estimate exceeds it (False: warn and go on).
    compare_after_steps: optimizer steps before the GPU comparison.
    oversubscribe: on CPU, start processes whose estimates together exceed the RAM
        available (processes.oversubscribe); else that stops the run in one line.
    snapshot: on CUDA, record allocations and write run_dir/memory_snapshot.pickle when the
        run runs out of memory (`litforge.monitors.out_of_memory`; it slows CUDA allocation).

    The measurements run on rebuilt copies of the module inside `torch.random.fork_rng`,
    so training (weights, RNG streams, data order) is the same with or without this.
    """

    def __init__(
        self,
        device_memory: str | int | None = MemoryBudgetSettings.device_memory,
        enforce: bool = MemoryBudgetSettings.enforce,
        compare_after_steps: int = MemoryBudgetSettings.compare_after_steps,
        # The schema's default is `${processes.oversubscribe}`, which only Hydra resolves:
        # outside it, the value that interpolation has by default.
        oversubscribe: bool = ProcessSettings.oversubscribe,
        snapshot: bool = MemoryBudgetSettings.snapshot,
    ) -> None:
        if device_memory is not None:  # parsed now: its error names the forms a size takes
            device_limit(torch.device("cpu"), device_memory, f"{KEY}.device_memory")
        settings = MemoryBudgetSettings.checked(  # a bad value: one line naming its key
            device_memory=device_memory,
            enforce=enforce,
            compare_after_steps=compare_after_steps,
            oversubscribe=oversubscribe,
            snapshot=snapshot,
        )
        self.device_memory = settings.device_memory
        self.enforce = settings.enforce
        self.compare_after_steps = settings.compare_after_steps
        self._comparing = False  # on_train_start: CUDA, rank 0 and an estimate
        self.oversubscribe = settings.oversubscribe
        self.snapshot = settings.snapshot
        self.estimate: Row | None = None  # rank 0's, once fit has set up
        self.subject: Any = None  # what it was measured on, for the options
        self.limit = report.Limit(None, "CPU (no limit)")
        self.peak: int | None = None  # torch.cuda.max_memory_allocated() when compared
        self.snapshot_path: Path | None = None
        self._recording = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if self.snapshot:
            self._recording = oom.start_recording(trainer.strategy.root_device)
            if not self._recording:
                console.warn(f"memory budget: {KEY}.snapshot needs CUDA; no snapshot on CPU")
        problem = self._check(trainer, pl_module) if trainer.is_global_zero else None
        # Every rank stops together; one stopping alone would leave the others waiting.
        problem = trainer.strategy.broadcast(problem, src=0)
        if problem:
            raise MemoryBudgetExceeded(problem)

    def _check(self, trainer: L.Trainer, pl_module: L.LightningModule) -> str | None:
        """Estimate and log; the error message when it does not fit and that is enforced."""
        datamodule = trainer.datamodule
        if datamodule is None:
            console.warn(f"memory budget: skipped (it needs a DataModule); {KEY}=null hides this")
            return None
        device = trainer.strategy.root_device
        limit = device_limit(device, self.device_memory, f"{KEY}.device_memory")
        try:
            subject = subject_of(
                pl_module,
                datamodule,
                trainer.accumulate_grad_batches,
                device,
                model_config(trainer),
            )
            if is_sharded(trainer.strategy):
                subject.shards = trainer.world_size
            row = subject.row(trainer.precision, subject.checkpointing)
            float8 = float8_layers(pl_module)  # precision=fp8: bf16-mixed around float8 layers
            if float8:
                row = dataclasses.replace(row, effective=f"{row.effective} + {float8}")
            if any(isinstance(c, WeightAveraging) for c in trainer.callbacks):  # type: ignore[attr-defined]
                row = report.with_average(row)
            self.estimate = row
            self.subject, self.limit = subject, limit
        except Exception as err:  # noqa: BLE001 - a default-on callback never stops a run
            console.warn(
                f"memory budget: skipped ({describe(err)}{before_setup(pl_module)}); "
                f"{KEY}=null hides this"
            )
            log.debug("memory budget: the measurement failed", exc_info=err)
            return None
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()  # the measurement's blocks go back before training
        _show(subject, row, limit)
        if device.type == "cpu" and not self.oversubscribe:
            problem = ram_problem(row.total, trainer.world_size // trainer.num_nodes)
            if problem:
                return problem
        if limit.fits(row.total):
            return None
        message = report.exceeded(row, limit, report.options(subject, row, limit), KEY)
        if self.enforce:
            return message
        console.warn(message)
        return None

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, err: BaseException
    ) -> None:
        if self._recording and oom.is_out_of_memory(err):
            self.snapshot_path = oom.dump_snapshot(trainer.default_root_dir)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._comparing = self._compares(trainer)  # asked once: on_train_batch_end is per step
        if self._comparing:
            torch.cuda.reset_peak_memory_stats(trainer.strategy.root_device)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        if self.peak is not None or not self._comparing:
            return
        if trainer.global_step < self.compare_after_steps:
            return
        assert self.estimate is not None
        self.peak = torch.cuda.max_memory_allocated(trainer.strategy.root_device)
        total = self.estimate.total
        console.info(
            "memory budget: estimated %s, measured peak %s after %d optimizer steps "
            "(torch.cuda.max_memory_allocated); the estimate is %+.0f%% of the peak",
            report.size(total), report.size(self.peak), trainer.global_step,
            100 * (total - self.peak) / max(self.peak, 1),
        )  # fmt: skip

    def _compares(self, trainer: L.Trainer) -> bool:
        cuda = trainer.strategy.root_device.type == "cuda"
        return cuda and trainer.is_global_zero and self.estimate is not None


def ram_problem(per_process: int, processes: int, available: int | None = None) -> str | None:
    """The one line when `processes` CPU processes of `per_process` bytes each do not fit
    in the RAM available; None when they do, or for one process (the budget covers it)."""
    available = available_ram() if available is None else available
    if processes < 2 or available is None or per_process * processes <= available:
        return None
    return (
        f"memory budget: {processes} CPU processes need about "
        f"{report.size(per_process * processes)} ({report.size(per_process)} each), more than "
        f"the {report.size(available)} of RAM available; use fewer trainer.devices, or "
        "processes.oversubscribe=true to start them anyway"
    )


def _show(subject: Any, row: Row, limit: report.Limit) -> None:
    """A table in a terminal a person watches; one line per row in logs and CI."""
    if not console.interactive():
        console.info(report.header(subject, row.precision))
        console.info(report.row_line(row, limit))
        return
    import rich

    rich.print(report.rich_table([row], subject, limit))


def before_setup(module: L.LightningModule) -> str:
    """Lightning calls the callbacks' `setup` before the module's own `setup` and
    `configure_model`: what a module completes there is missing when the budget measures."""
    hooks = [hook for hook in ("setup", "configure_model") if is_overridden(hook, module)]
    if not hooks:
        return ""
    names = " and ".join(f"{type(module).__name__}.{hook}()" for hook in hooks)
    return f"; it measured a training step before {names} ran"
