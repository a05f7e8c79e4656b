"""Fake tensors: a large model's copy measured in Python time and no memory.

Under torch's `FakeTensorMode` a tensor has its shape, dtype, device and storage size but
no data, so one `training_step` of a 175B model's block computes nothing and allocates
nothing, while autograd saves the same tensors as on real ones (tests compare the bytes).
A step that reads values (`.item()`, an output shape that depends on data such as
torchmetrics' `bincount`) cannot run there; the caller measures that one on real tensors.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode


def fake_mode() -> FakeTensorMode:
    """A mode in which new tensors are fake; real ones a step meets (a plain tensor
    attribute, not a buffer) are read as constants."""
    return FakeTensorMode(allow_non_fake_inputs=True)


def fake_batch(batch: Any, mode: FakeTensorMode) -> Any:
    """The batch with each tensor replaced by a fake one of its shape, dtype and device."""
    return apply_to_collection(batch, torch.Tensor, mode.from_tensor)


def materialize_fake(module: nn.Module, device: torch.device, mode: FakeTensorMode) -> None:
    """Replace the module's meta parameters and buffers by fake ones on `device`, of the
    same dtypes, tied parameters kept tied. (`Module._apply` cannot: it swaps a subclass
    tensor into each owner and fails on a tied parameter.)"""
    made: dict[int, nn.Parameter] = {}
    with mode:
        for owner in module.modules():
            for name, param in list(owner._parameters.items()):
                if param is not None and param.is_meta:
                    if id(param) not in made:
                        fake = torch.empty_like(param, device=device)
                        made[id(param)] = nn.Parameter(fake, requires_grad=param.requires_grad)
                    owner._parameters[name] = made[id(param)]
            for name, buffer in list(owner._buffers.items()):
                if buffer is not None and buffer.is_meta:
                    owner._buffers[name] = torch.zeros_like(buffer, device=device)
