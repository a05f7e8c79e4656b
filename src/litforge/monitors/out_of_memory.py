"""Why out of memory: a `torch.OutOfMemoryError` in fit ends with one block that says in
which phase it happened, what the memory budget expected next to the device's total and
peak, what to change (in the budget's order) and, with `callbacks.memory_budget.snapshot=true`
on CUDA, where the allocator's snapshot is (open it at https://pytorch.org/memory_viz)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch

from litforge.errors import LitforgeError
from litforge.exits import explain_with
from litforge.planning.budget import report

SNAPSHOT_NAME = "memory_snapshot.pickle"


class OutOfMemory(LitforgeError):
    """The device ran out of memory during fit; exit status 66."""

    exit_code = 66
    interrupts = False  # the same command fails the same way: a sweep records the trial


class ExplainOutOfMemory(L.Callback):
    """conf/callbacks/out_of_memory.yaml: an out-of-memory error in fit gets its block
    (`explain`) attached, which the entry point ends with (exit status 66) and a
    notebook's traceback shows as a note."""

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if is_out_of_memory(exception):
            explain_with(exception, explain(trainer, exception))


def explain(trainer: L.Trainer, err: BaseException) -> OutOfMemory:
    """The block for an out-of-memory error raised by `trainer.fit`."""
    from litforge.monitors.memory_budget import MemoryBudget

    budget = next((c for c in trainer.callbacks if isinstance(c, MemoryBudget)), None)
    phase = phase_of(err)
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    lines = [
        f"out of memory in the {phase} at optimizer step {trainer.global_step} "
        f"(epoch {trainer.current_epoch}): {first}",
        f"  device: {_device_line(trainer.strategy.root_device)}",
    ]
    if budget is None or budget.estimate is None or budget.subject is None:
        lines.append("  memory budget: not measured (callbacks.memory_budget is off)")
    else:
        row, limit = budget.estimate, budget.limit
        lines.append("  " + report.row_line(row, limit))
        options = report.options(budget.subject, row, limit)
        if options:
            lines.append("  options, in order:")
            lines += [f"    {option}" for option in options]
    if budget is not None and budget.snapshot_path is not None:
        lines.append(
            f"  memory snapshot: {budget.snapshot_path} (open it at https://pytorch.org/memory_viz)"
        )
    return OutOfMemory("\n".join(lines))


# The Lightning calls each phase of fit runs inside: (module prefix, function) -> phase.
# Read off the error's traceback, innermost first, so no hook has to follow the phase per
# step: a forward runs inside optimizer_step (its closure), a backward after the forward.
_PHASES = {
    ("lightning.pytorch.strategies", "training_step"): "forward",
    ("lightning.pytorch.strategies", "backward"): "backward",
    ("lightning.pytorch.strategies", "optimizer_step"): "optimizer step",
    ("lightning.pytorch.loops.evaluation_loop", "_evaluation_step"): "validation",
    ("lightning.pytorch.loops.training_epoch_loop", "advance"): "hooks between steps",
}
_SANITY = ("lightning.pytorch.trainer.trainer", "_run_sanity_check")


def phase_of(err: BaseException) -> str:
    """The phase of fit `err` was raised in: forward, backward, optimizer step, validation,
    sanity validation, hooks between steps, or setup (before the first batch)."""
    frames = []
    tb = err.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        frames.append((module.rsplit(".", 1)[0], module, tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
    for package, module, function in reversed(frames):
        phase = _PHASES.get((package, function)) or _PHASES.get((module, function))
        if phase == "validation" and any((m, f) == _SANITY for _, m, f in frames):
            return "sanity validation"
        if phase is not None:
            return phase
    return "setup"


def _device_line(device: torch.device) -> str:
    if device.type != "cuda":
        return f"{device.type} (no device memory limit of its own)"
    total = torch.cuda.get_device_properties(device).total_memory
    peak = torch.cuda.max_memory_allocated(device)
    name = torch.cuda.get_device_name(device)
    return (
        f"{name}, {report.size(total)} total, peak allocated {report.size(peak)} "
        "(torch.cuda.max_memory_allocated)"
    )


def start_recording(device: torch.device) -> bool:
    """Record CUDA allocations for a snapshot; False where there is no CUDA to record."""
    if device.type != "cuda":
        return False
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    return True


def dump_snapshot(run_dir: str | Path) -> Path | None:
    path = Path(run_dir) / SNAPSHOT_NAME
    try:
        torch.cuda.memory._dump_snapshot(str(path))
    except (RuntimeError, OSError):
        return None
    return path


def is_out_of_memory(err: Any) -> bool:
    return isinstance(err, torch.OutOfMemoryError)
