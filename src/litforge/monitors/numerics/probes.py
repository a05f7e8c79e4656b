"""What the numerics watch measures with, without reading the device every step: a ring
of host copies of a small tensor, and per-module activation peaks."""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch

from litforge.monitors.numerics.report import FP16_MAX


class HostRing:
    """Host copies of a small CUDA tensor, one per step, made without blocking the host
    (non_blocking copies into pinned buffers, each with an event; a CPU tensor is kept as it
    is), handed back in order once they have arrived. With `slots` copies in flight the
    oldest is waited for: the host is then that many steps ahead of the device."""

    def __init__(self, slots: int = 4) -> None:
        self.slots = slots
        self._pending: deque[tuple[int, Any, torch.Tensor, Any]] = deque()
        self._spare: list[torch.Tensor] = []

    def push(self, step: int, tensor: torch.Tensor, extra: Any = None) -> None:
        """`tensor` must not be written to afterwards (on the host it is kept, not copied)."""
        event = None
        if tensor.device.type != "cpu":
            host = self._spare.pop() if self._spare else None
            if host is None or host.shape != tensor.shape:
                host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            tensor = host
        self._pending.append((step, extra, tensor, event))

    def take(self, upto: int | None = None) -> Iterator[tuple[int, Any, list[float]]]:
        """(step, extra, values), oldest first: those of steps <= `upto`, waiting for them;
        without `upto`, those that have arrived."""
        while self._pending:
            step, extra, host, event = self._pending[0]
            if upto is not None and step > upto:
                return
            if event is not None and not event.query():
                if upto is None and len(self._pending) < self.slots:
                    return
                event.synchronize()
            self._pending.popleft()
            # .numpy() only works on host memory: reading it cannot wait on a device.
            values = host.numpy().tolist()
            if event is not None:
                self._spare.append(host)
            yield step, extra, values


class ActivationPeaks:
    """Forward hooks on every leaf module, in training: the largest |output| (NaN counts as
    inf) and the first step whose output overflowed float16, both kept on the device."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.step = 0.0  # the global step, set by the watch before each batch
        self._state: dict[str, torch.Tensor] = {}  # name -> [peak, first step over, or -1]
        self._handles = [
            sub.register_forward_hook(functools.partial(self._record, name))
            for name, sub in module.named_modules()
            if name and next(sub.children(), None) is None
        ]

    def _record(self, name: str, module: torch.nn.Module, args: Any, output: Any) -> None:
        out = output[0] if isinstance(output, (tuple, list)) and output else output
        if not module.training or not isinstance(out, torch.Tensor):
            return
        # Meta tensors: a FLOP count on a copy of the module, which carries these hooks.
        if not out.is_floating_point() or out.numel() == 0 or out.is_meta:
            return
        peak = torch.nan_to_num(out.detach().abs().amax().float(), nan=math.inf)
        state = self._state.get(name)
        if state is None:  # dicts keep insertion order: the order of execution
            state = self._state[name] = torch.tensor([0.0, -1.0], device=out.device)
        first = (peak > FP16_MAX) & (state[1] < 0)
        state[1] = torch.where(first, self.step, state[1])
        state[0] = torch.maximum(state[0], peak)

    def read(self) -> list[tuple[str, float, int]]:
        """(module, largest |activation| / float16's max, first step over it or -1), in the
        order the modules ran; one read for all."""
        if not self._state:
            return []
        values = torch.stack(list(self._state.values())).cpu().tolist()
        return [
            (name, peak / FP16_MAX, int(first))
            for name, (peak, first) in zip(self._state, values, strict=True)
        ]

    def clear(self) -> None:
        self._state.clear()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def grad_norms(grads: list[torch.Tensor], sharded: bool = True) -> list[torch.Tensor]:
    """Each gradient's float32 L2 norm (a float16 norm overflows at 65504).

    Under trainer=fsdp each process holds a slice of every gradient (a DTensor): the norms
    of the slices are combined across processes, one all-reduce per step. `sharded=False`
    (known plain tensors) skips looking for slices.
    """
    if not sharded:
        return list(torch._foreach_norm(grads, 2.0, dtype=torch.float32))
    local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
    norms = torch._foreach_norm(local, 2.0, dtype=torch.float32)
    if local[0] is grads[0]:
        return list(norms)
    squares = torch.stack(norms).square()
    torch.distributed.all_reduce(squares, group=grads[0].device_mesh.get_group())
    return list(squares.sqrt())


def weights_finite(pl_module: torch.nn.Module, strategy: Any) -> bool:
    """Whether every parameter is finite on every rank (each rank checks what it holds: its
    shard of a DTensor under FSDP); one small all-reduce under DDP and FSDP."""
    finite = True
    with torch.no_grad():
        for p in pl_module.parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if local.numel() and not bool(torch.isfinite(local).all()):
                finite = False
                break
    return bool(strategy.reduce_boolean_decision(finite, all=True))


def vanishing_eps(optimizers: Any) -> list[str]:
    """`eps=1e-08 rounds to 0 in torch.float16` for each optimizer whose eps is zero in
    its parameters' dtype (the update then divides by zero where a second moment is 0)."""
    found = []
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            eps, params = group.get("eps"), group.get("params") or []
            if not isinstance(eps, float) or eps <= 0 or not params:
                continue
            dtype = params[0].dtype
            if dtype.is_floating_point and float(torch.tensor(eps, dtype=dtype)) == 0.0:
                found.append(f"{type(optimizer).__name__} eps={eps:g} rounds to 0 in {dtype}")
                break
    return found
