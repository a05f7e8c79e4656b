"""Activation bytes: what autograd saves for backward in one `training_step`.

Measured on a rebuilt copy of the module, under the precision plugin's
`train_step_context` as Lightning runs it, at 1 and 2 samples and linear beyond. A small
module is measured whole (its copy holds its weights). A large one that declares its
repeated block (`shard_unit`) is measured by depth (`litforge.toolkit.budget.depth`): with
no block and with 1 block, each at 1 and 2 samples, which gives the part outside the blocks
and one block's part (each a fixed part, such as autocast's cached weight casts, plus an
amount per sample); the total is the outside plus depth times the block.
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch
from lightning.fabric.utilities.init import _EmptyInit
from lightning_utilities.core.apply_func import apply_to_collection

from litforge.errors import LitforgeError
from litforge.toolkit.budget import depth
from litforge.toolkit.budget.attention import FusedKernels
from litforge.toolkit.budget.copies import precision_plugin, rebuild, saved_bytes
from litforge.toolkit.hardware import available_ram

if TYPE_CHECKING:
    from litforge.toolkit.budget.measure import Subject

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

    def at(self, batch_size: int) -> int:
        return self.fixed + self.per_sample * batch_size


def whole(subject: Subject, precision: str, checkpointing: bool | None) -> Activations:
    """The whole module at 1 and 2 samples."""
    (one, two), calls = measure_copies(subject, precision, checkpointing, [(None, 1), (None, 2)])
    return Activations(2 * one - two, two - one, fused_calls=calls)


def by_depth(subject: Subject, precision: str, checkpointing: bool | None) -> Activations:
    """No block and 1 block, each at 1 and 2 samples, scaled to the module's depth."""
    blocks = depth.find_blocks(subject.module)
    assert blocks is not None
    (none1, none2, one1, one2), calls = measure_copies(
        subject, precision, checkpointing, [(0, 1), (0, 2), (1, 1), (1, 2)]
    )
    outside = Activations(2 * none1 - none2, none2 - none1)
    # One block: per sample, and a fixed part (autocast's cached weight casts, masks).
    block = Activations(2 * (one1 - none1) - (one2 - none2), (one2 - none2) - (one1 - none1))
    return Activations(
        outside.fixed + blocks.count * block.fixed,
        outside.per_sample + blocks.count * block.per_sample,
        blocks.count,
        block.per_sample,
        calls,
        block.fixed,
    )


def measure_copies(
    subject: Subject,
    precision: str,
    checkpointing: bool | None,
    runs: list[tuple[int | None, int]],
) -> tuple[list[int], int]:
    """Saved bytes per run of (blocks kept, None for all; samples), all on one copy; and
    how many attention calls were counted as fused kernels save them."""
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
        if meta:
            _check_ram(copy, subject)
            depth.materialize(copy, subject.device)
        else:
            # strict_loading=False: a module whose state is partial (LoRA adapters only).
            copy.load_state_dict(subject.module.state_dict(), strict=copy.strict_loading)
        copy = plugin.convert_module(copy).to(subject.device).train()
        kept = [*copy.parameters(), *copy.buffers()]
        for count, samples in runs:
            if blocks is not None and count is not None:
                blocks.set(count)
            batch = plugin.convert_input(subject.batch(samples))
            batch = apply_to_collection(batch, torch.Tensor, lambda t: t.to(subject.device))
            mode = FusedKernels() if subject.attention == "fused" else nullcontext()
            with plugin.train_step_context(), warnings.catch_warnings(), mode:
                warnings.filterwarnings("ignore", message=_NO_LOG_WARNING)
                found.append(saved_bytes(partial(copy.training_step, batch, 0), kept))
            calls = max(calls, getattr(mode, "calls", 0))
            del batch
        del copy, kept, blocks
    return found, calls


def _is_meta(module: torch.nn.Module) -> bool:
    return any(p.is_meta for p in module.parameters())


def _check_ram(copy: torch.nn.Module, subject: Subject) -> None:
    """One line instead of the kernel's OOM killer when the copy's weights would take more
    than RAM_SHARE of the free RAM (the measurement needs its activations on top)."""
    need, free = depth.parameter_bytes(copy), available_ram()
    if subject.device.type != "cpu" or free is None or need <= RAM_SHARE * free:
        return
    name = type(subject.module).__name__
    raise LitforgeError(
        f"the memory budget would build {need / 2**30:.1f} GiB of {name}'s weights to measure its "
        f"activations, more than {RAM_SHARE:.0%} of this machine's free RAM ({free / 2**30:.1f} GiB); "
        f"set `shard_unit` on {name} to its repeated block class (a ModuleList of them), so "
        "that one block is measured and scaled by depth"
    )
