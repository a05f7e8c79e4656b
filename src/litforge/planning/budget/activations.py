"""Activation bytes: what autograd saves for backward in one `training_step`.

Measured on a rebuilt copy of the module, under the precision plugin's
`train_step_context` as Lightning runs it, at 1 and 2 samples (2 and 4 with BatchNorm)
and linear beyond. A small module is measured whole (its copy holds its weights). A large
one is built on the meta device and, on a CPU, measured on fake tensors
(`litforge.planning.budget.fake`: no memory, no arithmetic), on real ones when its step
reads values (and on a GPU). One that
declares its repeated block (`shard_unit`) is measured by depth
(`litforge.planning.budget.depth`): with no block and with 1 block, each at both sample
counts, which gives the part outside the blocks and one block's part (each a fixed part,
such as autocast's cached weight casts, plus an amount per sample); the total is the
outside plus depth times the block.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch
from lightning.fabric.utilities.init import _EmptyInit
from lightning_utilities.core.apply_func import apply_to_collection
from torch.nn.modules.batchnorm import _BatchNorm

from litforge.errors import LitforgeError
from litforge.planning.budget import depth
from litforge.planning.budget.attention import FusedKernels
from litforge.planning.budget.copies import precision_plugin, rebuild, saved_bytes
from litforge.planning.budget.failure import describe
from litforge.planning.budget.fake import fake_batch, fake_mode, materialize_fake
from litforge.planning.budget.units import size
from litforge.planning.hardware import available_ram
from litforge.precision.fp8.training import convert_like, is_float8

if TYPE_CHECKING:
    from litforge.planning.budget.measure import Subject

log = logging.getLogger(__name__)
RAM_SHARE = 0.5  # a whole-model measurement may take at most this share of free RAM
_NO_LOG_WARNING = r".*self\.log\(\)` but the `self\.trainer` reference is not registered.*"


@dataclass(frozen=True)
class Activations:
    """Saved bytes of one training_step: `fixed + per_sample * batch`; by depth also how
    many blocks there are and one block's bytes per sample."""

    fixed: int
    per_sample: int
    layers: int | None = None
    per_layer: int | None = None  # one block's bytes per sample
    fused_calls: int = 0  # attention calls counted as CUDA's fused kernels save them
    per_layer_fixed: int | None = None  # one block's bytes whatever the batch
    samples: int = 1  # measured at this many samples and twice as many
    fake: bool = False  # measured on fake tensors (shapes without data)

    def at(self, batch_size: int) -> int:
        return self.fixed + self.per_sample * batch_size


def first_samples(module: torch.nn.Module) -> int:
    """The smaller of the two sample counts measured: 2 (then 4) for a module with
    BatchNorm, whose training mode refuses one sample per channel, else 1 (then 2)."""
    return 2 if any(isinstance(m, _BatchNorm) for m in module.modules()) else 1


def _line(small: int, large: int, samples: int) -> tuple[int, int]:
    """(fixed, per sample) through the bytes at `samples` and at twice as many."""
    per_sample = (large - small) // samples
    return small - samples * per_sample, per_sample


def whole(subject: Subject, precision: str, checkpointing: bool | None) -> Activations:
    """The whole module at n and 2n samples (`first_samples`)."""
    n = first_samples(subject.module)
    (small, large), how = measure_copies(
        subject, precision, checkpointing, [(None, n), (None, 2 * n)]
    )
    return Activations(
        *_line(small, large, n), fused_calls=how.fused_calls, samples=n, fake=how.fake
    )


def by_depth(subject: Subject, precision: str, checkpointing: bool | None) -> Activations:
    """No block and 1 block, each at n and 2n samples, scaled to the module's depth."""
    blocks = depth.find_blocks(subject.module)
    assert blocks is not None
    n = first_samples(subject.module)
    runs = [(0, n), (0, 2 * n), (1, n), (1, 2 * n)]
    (none1, none2, one1, one2), how = measure_copies(subject, precision, checkpointing, runs)
    outside_fixed, outside_per_sample = _line(none1, none2, n)
    # One block: per sample, and a fixed part (autocast's cached weight casts, masks).
    block_fixed, block_per_sample = _line(one1 - none1, one2 - none2, n)
    return Activations(
        outside_fixed + blocks.count * block_fixed,
        outside_per_sample + blocks.count * block_per_sample,
        blocks.count,
        block_per_sample,
        how.fused_calls,
        block_fixed,
        n,
        how.fake,
    )


@dataclass(frozen=True)
class How:
    """How a measurement ran: attention calls counted as fused kernels save them, and
    whether on fake tensors (no memory) or real ones."""

    fused_calls: int
    fake: bool


def measure_copies(
    subject: Subject,
    precision: str,
    checkpointing: bool | None,
    runs: list[tuple[int | None, int]],
) -> tuple[list[int], How]:
    """Saved bytes per run of (blocks kept, None for all; samples), all on one copy. On a
    CPU a module on the meta device or measured by depth runs on fake tensors; on real
    ones, materialised, when its step cannot run on fake ones (it reads values)."""
    shallow = any(blocks is not None for blocks, _ in runs)
    # On CUDA the kernels a fake tensor would pick are unchecked: real ones measure there.
    if not (shallow or _is_meta(subject.module)) or subject.device.type != "cpu":
        return _measure(subject, precision, checkpointing, runs, fake=False)
    try:
        return _measure(subject, precision, checkpointing, runs, fake=True)
    except Exception as err:  # noqa: BLE001 - any op a fake tensor cannot run
        log.debug("memory budget: fake tensors could not run the step (%r); real ones do", err)
        return _measure(subject, precision, checkpointing, runs, fake=False, unfaked=err)


def _measure(
    subject: Subject,
    precision: str,
    checkpointing: bool | None,
    runs: list[tuple[int | None, int]],
    fake: bool,
    unfaked: Exception | None = None,
) -> tuple[list[int], How]:
    plugin = precision_plugin(precision, subject.device)
    changes = {} if checkpointing is None else {"gradient_checkpointing": checkpointing}
    shallow = any(blocks is not None for blocks, _ in runs)
    meta = shallow or _is_meta(subject.module)
    found, calls = [], 0
    with torch.random.fork_rng(subject._rng_devices()):
        with torch.device("meta") if meta else nullcontext(), _EmptyInit():
            copy = rebuild(subject.module, subject.config, **changes)
        blocks = depth.Depth(copy) if shallow else None
        if blocks is not None:
            blocks.set(1)
        fakes = fake_mode() if fake else None
        if fakes is not None:
            # Converted on meta, then faked: the fake tensors are never moved or cast.
            copy = plugin.convert_module(copy)
            _float8_like(copy, subject.module)
            materialize_fake(copy, subject.device, fakes)
            copy.train()
        elif meta:
            _check_ram(copy, subject, unfaked)
            _say_real(copy, subject, unfaked)
            depth.materialize(copy, subject.device)
        else:
            # strict_loading=False: a module whose state is partial (LoRA adapters only).
            copy.load_state_dict(subject.module.state_dict(), strict=copy.strict_loading)
        if fakes is None:
            copy = plugin.convert_module(copy).to(subject.device).train()
            _float8_like(copy, subject.module)
        _metrics_on_this_process(copy)
        with fakes or nullcontext():
            kept = [*copy.parameters(), *copy.buffers()]
            for count, samples in runs:
                if blocks is not None and count is not None:
                    blocks.set(count)
                batch = plugin.convert_input(subject.batch(samples))
                batch = apply_to_collection(batch, torch.Tensor, lambda t: t.to(subject.device))
                if fakes is not None:
                    batch = fake_batch(batch, fakes)
                mode = FusedKernels() if subject.attention == "fused" else nullcontext()
                with plugin.train_step_context(), warnings.catch_warnings(), mode:
                    warnings.filterwarnings("ignore", message=_NO_LOG_WARNING)
                    found.append(saved_bytes(partial(copy.training_step, batch, 0), kept))
                calls = max(calls, getattr(mode, "calls", 0))
                del batch
        del copy, kept, blocks
    return found, How(calls, fake)


def _float8_like(copy: torch.nn.Module, module: torch.nn.Module) -> None:
    """precision=fp8: the run's model has torchao Float8Linear layers (converted when it was
    built), so the copy gets the same ones: it then saves for backward what fp8 saves."""
    if any(is_float8(m) for m in module.modules()):
        convert_like(copy, module)


def _metrics_on_this_process(module: torch.nn.Module) -> None:
    """The copy's torchmetrics compute from this process's state alone. Only rank 0
    measures while the other ranks wait for its answer, so a `metric.compute()` in the step
    (which under DDP gathers from every rank) would wait for them until the collective
    timeout."""
    from torchmetrics import Metric

    for metric in module.modules():
        if isinstance(metric, Metric):
            metric.distributed_available_fn = _no_process_group


def _no_process_group() -> bool:
    return False


def _is_meta(module: torch.nn.Module) -> bool:
    return any(p.is_meta for p in module.parameters())


def _say_real(copy: torch.nn.Module, subject: Subject, unfaked: Exception | None) -> None:
    """A line before a large module's copy is measured on real weights: that computes."""
    if unfaked is not None:
        log.warning(
            "memory budget: %s's training_step does not run on fake tensors (%s); measuring "
            "it on %s of real weights instead, which computes the step and takes longer",
            type(subject.module).__name__, describe(unfaked), size(depth.parameter_bytes(copy)),
        )  # fmt: skip


def _check_ram(copy: torch.nn.Module, subject: Subject, unfaked: Exception | None) -> None:
    """One line instead of the kernel's OOM killer when the copy's real weights would take
    more than RAM_SHARE of the free RAM (the measurement needs its activations on top);
    `unfaked`: why fake tensors could not measure it."""
    need, free = depth.parameter_bytes(copy), available_ram()
    if subject.device.type != "cpu" or free is None or need <= RAM_SHARE * free:
        return
    name = type(subject.module).__name__
    blocks = depth.find_blocks(subject.module)
    what = f"{name}'s weights" if blocks is None else (
        f"{name}'s weights outside its {blocks.count} blocks and one "
        f"{subject.module.shard_unit.__name__} block"  # type: ignore[union-attr]
    )  # fmt: skip
    why = "" if unfaked is None else (
        f" (its training_step does not run on fake tensors: {describe(unfaked)})"
    )  # fmt: skip
    fix = (
        f"set `shard_unit` on {name} to its repeated block class (a ModuleList of them), so "
        "that one block is measured and scaled by depth"
        if blocks is None
        else "measure on a machine with more RAM, or keep the step from reading tensor "
        "values (.item(), data-dependent shapes) so that fake tensors measure it"
    )
    raise LitforgeError(
        f"the memory budget would build {size(need)} of {what} to measure its "
        f"activations{why}, more than {RAM_SHARE:.0%} of this machine's free RAM "
        f"({size(free)}); {fix}"
    )
