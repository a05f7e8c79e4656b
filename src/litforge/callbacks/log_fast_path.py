"""`self.log` without its per-call walk of the logged metric when nothing has to move.

Lightning's `_ResultCollection.log` calls `_ResultMetric.to(value.device)` on every
`self.log` call, and that `to` walks the metric's whole `__dict__` (module hooks, state
defaults, metadata) through `apply_to_collection` even when every tensor is already on that
device: ~0.4 ms per call on a 2-core CPU, ~2.5% of the digits CNN's step for its one
per-step `self.log`, and more for a module that logs several values (Lightning-AI/
pytorch-lightning#20388; the fix, #21769, is not merged). While a run's fit is active on a
thread, this callback returns early from that call when the metric's tensors are all on
the requested device; any other call (a dtype, a move to another device, kwargs) takes
Lightning's own path. Drop it with `callbacks.log_fast_path=null`.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.connectors.logger_connector import result

_active = threading.local()  # per thread: a relay of two fits in one process stays apart


def _already_there(metric: Any, device: torch.device) -> bool:
    state = metric.__dict__
    tensors = [state.get("value"), state.get("cumulated_batch_size")]
    tensors += list(state.get("_defaults", {}).values())
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(t.device == device for t in tensors)


def _install() -> None:
    original = result._ResultMetric.to
    if getattr(original, "_litforge_fast_path", False):
        return

    @functools.wraps(original)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_active, "on", False) and not kwargs and len(args) == 1:
            target = args[0]
            if isinstance(target, str | torch.device) and _already_there(
                self, torch.device(target)
            ):
                return self
        return original(self, *args, **kwargs)

    to._litforge_fast_path = True  # type: ignore[attr-defined]
    result._ResultMetric.to = to


class LogFastPath(L.Callback):
    """Skips the no-op device move in each `self.log` call during this run's fit."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        _install()
        _active.on = True

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        _active.on = False
