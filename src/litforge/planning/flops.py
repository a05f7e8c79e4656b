"""FLOPs of a training step, counted on meta tensors: the model's, and the hardware's
(with the forward that gradient checkpointing recomputes). Used by the throughput callback.

Lightning's `measure_flops` on a meta-device copy of the first batch and the model's
parameters (no memory, no compute, no RNG draws), forward plus backward. On meta tensors
attention is counted on every machine: on real CPU tensors torch 2.13's FlopCounterMode
counts nothing for the fused attention kernel (pytorch/pytorch#195460).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.throughput import measure_flops
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.fsdp import FSDPModule
from torch.func import functional_call

from litforge import console
from litforge.checkpointing.model_record import model_config
from litforge.errors import LitforgeError
from litforge.planning.budget.copies import has_checkpointing, rebuild


def first_tensor(batch: Any) -> torch.Tensor | None:
    """The first tensor in a (nested) batch: the input of (x, y), a dict's first value."""
    if isinstance(batch, torch.Tensor):
        return batch
    if type(batch) in (list, tuple) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0]  # (x, y): the common case, without the ABC checks (per step)
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, Sequence) and not isinstance(batch, str):
        for item in batch:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def token_count(batch: Any) -> int | None:
    """B*T when the batch's input is a (B, T) tensor of token ids; None for anything else."""
    x = first_tensor(batch)
    if (
        x is None
        or x.dim() != 2
        or x.is_floating_point()
        or x.is_complex()
        or x.dtype == torch.bool
    ):
        return None
    return x.numel()


class _ForwardBackward(nn.Module):
    """forward + backward in one call: functional_call swaps in the meta parameters only
    for the length of a call, and gradient checkpointing recomputes inside backward."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> None:
        out = self.model(x)
        out = out if isinstance(out, torch.Tensor) else first_tensor(out)
        if out is None:
            raise TypeError(f"{type(self.model).__name__}(x) returned no tensor")
        out.sum().backward()


def step_flops(model: nn.Module, x: torch.Tensor) -> int:
    """FLOPs of one forward and backward of `model` on `x`, counted on meta tensors.

    Under FakeTensorMode: code that reads a value where it can (transformers' check for
    packed sequences calls `.item()`, which a meta tensor cannot answer) takes the path it
    takes while compiling; the counts are the same."""
    step = _ForwardBackward(model)
    meta = {
        name: torch.empty_like(p, device="meta").requires_grad_(p.requires_grad)
        for name, p in step.named_parameters()
    }
    meta.update({name: torch.empty_like(b, device="meta") for name, b in step.named_buffers()})
    x_meta = torch.empty_like(x, device="meta")
    with torch.enable_grad(), FakeTensorMode(allow_non_fake_inputs=True):
        return measure_flops(step, lambda: functional_call(step, meta, (x_meta,)))


def measure_or_warn(
    pl_module: L.LightningModule, batch: Any, trainer: L.Trainer
) -> tuple[int, int] | None:
    """Model and hardware FLOPs of a forward and backward on `batch` (they differ by the
    forward that gradient checkpointing recomputes); None, with a warning, if uncountable."""
    x = first_tensor(batch)
    try:
        if x is None:
            raise TypeError("the batch holds no tensor")
        model: nn.Module = pl_module
        if any(isinstance(m, FSDPModule) for m in pl_module.modules()):
            # trainer=fsdp: the sharded module's forward gathers weights from every rank, and
            # only rank 0 measures; an unsharded twin on meta tensors has the same FLOPs.
            with torch.device("meta"):
                model = rebuild(pl_module, model_config(trainer))
        # What training_step sees: "-true" precisions cast floating inputs.
        x = trainer.precision_plugin.convert_input(x)
        hardware = step_flops(model, x)
        if not (has_checkpointing(pl_module) and pl_module.hparams.get("gradient_checkpointing")):
            return hardware, hardware
        try:
            with torch.device("meta"):
                plain = rebuild(pl_module, model_config(trainer), gradient_checkpointing=False)
        except LitforgeError as err:
            console.warn("throughput: MFU counts the recomputed forward too: %s", err)
            return hardware, hardware
        return step_flops(plain, x), hardware
    except Exception as err:  # noqa: BLE001 - any model may fail on meta tensors
        console.warn("throughput: FLOPs not measured, so no FLOP/s or MFU: %s", err)
        return None
