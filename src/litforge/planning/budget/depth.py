"""A large model's activations from one of its repeated blocks, scaled by depth.

A 7B model's weights do not fit in a laptop's RAM, but its activations are the same for
each of its repeated blocks (the module's `shard_unit`, the block FSDP shards and
gradient checkpointing recomputes). The memory budget builds the model on the meta device
(no memory), keeps one block where the model had L, materialises that shallow copy and
measures it with no block and with 1: the difference is one block's bytes, and the rest
(embeddings, head, loss) is what the model saves without its blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from litforge import hooks


@dataclass(frozen=True)
class Blocks:
    """Where a module's repeated blocks are: `parent.<name>` holds `count` of them."""

    parent: nn.Module
    name: str
    count: int


def shard_unit_of(module: nn.Module) -> type[nn.Module] | None:
    """The block class a module declares as its repeated unit (`shard_unit`), if any."""
    unit = hooks.shard_unit_of(module)
    return unit if isinstance(unit, type) and issubclass(unit, nn.Module) else None


def find_blocks(module: nn.Module) -> Blocks | None:
    """The ModuleList or Sequential of `shard_unit` blocks, when every block of the module
    is in that one container (else None: the module is measured whole)."""
    unit = shard_unit_of(module)
    if unit is None:
        return None
    total = sum(isinstance(m, unit) for m in module.modules())
    for parent in module.modules():
        for name, child in parent.named_children():
            if (
                isinstance(child, (nn.ModuleList, nn.Sequential))
                and len(child) >= 2
                and len(child) == total
                and all(isinstance(block, unit) for block in child)
            ):
                return Blocks(parent, name, len(child))
    return None


class Depth:
    """A module's blocks replaced by its first one, any number of times (one set of
    weights): `Depth(module).set(0)`, `.set(1)`."""

    def __init__(self, module: nn.Module) -> None:
        blocks = find_blocks(module)
        if blocks is None:
            raise ValueError(f"{type(module).__name__} has no container of shard_unit blocks")
        self.parent, self.name = blocks.parent, blocks.name
        container = getattr(self.parent, self.name)
        self.sequential = isinstance(container, nn.Sequential)
        self.block: nn.Module = container[0]

    def set(self, depth: int) -> None:
        blocks = [self.block] * depth
        container = nn.Sequential(*blocks) if self.sequential else nn.ModuleList(blocks)
        setattr(self.parent, self.name, container)


def parameter_bytes(module: nn.Module, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the module's distinct parameters at `dtype` (floating ones) or their own."""
    size = torch.empty((), dtype=dtype).element_size()
    return sum(p.numel() * (size if p.is_floating_point() else p.element_size())
               for p in module.parameters())  # fmt: skip


def materialize(module: nn.Module, device: torch.device) -> None:
    """Give meta tensors memory on `device` and initialise them: parameters by each
    submodule's `reset_parameters` (else small normal values), buffers and other state
    zero. Tied parameters stay tied, which `Module.to_empty` does not keep (a new
    Parameter per owner when the tensor changes device type)."""
    made: dict[int, nn.Parameter] = {}
    for owner in module.modules():
        for name, param in list(owner._parameters.items()):
            if param is None or not param.is_meta:
                continue
            if id(param) not in made:
                real = torch.empty_like(param, device=device)
                made[id(param)] = nn.Parameter(real, requires_grad=param.requires_grad)
            owner._parameters[name] = made[id(param)]
    # Buffers and other tensors a module moves in `_apply` (torchmetrics' states).
    module._apply(lambda t: torch.zeros_like(t, device=device) if t.is_meta else t)
    with torch.no_grad():
        for param in made.values():
            if param.is_floating_point():
                param.normal_(0.0, 0.02)
        for owner in module.modules():
            reset = getattr(owner, "reset_parameters", None)
            if callable(reset) and any(id(p) in made for p in owner.parameters(recurse=False)):
                reset()
