"""What one run of a precision A/B records: its loss per step, speed and memory.

`PrecisionProbe` is a Lightning callback (conf/experiment/precision_ab.yaml adds it as
`callbacks.precision_probe`); at the end of fit rank 0 writes `run_dir/precision_probe.json`,
which `litforge.precision_checks.training_ab.experiment.PrecisionReport` reads once the sweep is over.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.autograd.graph import saved_tensors_hooks

from litforge.errors import ConfigError
from litforge.precision import PRECISIONS
from litforge.precision.fp8.training import OPTION, describe

PROBE_FILE = "precision_probe.json"


class PrecisionProbe(L.Callback):
    """Per optimizer step: the training loss (micro-batches of one step averaged) and the
    wall time at its end. Once: the bytes autograd saves for backward in the first training
    batch (activations, plus the low-precision weight copies autocast makes; parameters
    themselves are not counted), and on CUDA the peak allocated memory of the run.

    requested: the precision the config asked for (Lightning may run another, e.g. 16-mixed
    runs as bf16-mixed on CPU); both are recorded. fp8: `precision.fp8` (tensorwise or
    rowwise: the run is precision=fp8 or fp8-rowwise, recorded by that name).
    """

    def __init__(self, requested: str, fp8: str = "off") -> None:
        if str(requested) not in PRECISIONS:
            raise ConfigError(
                f"callbacks.precision_probe.requested={requested!r} is not one of: "
                + ", ".join(PRECISIONS)
            )
        if fp8 != "off" and fp8 not in OPTION:
            raise ConfigError(
                f"callbacks.precision_probe.fp8={fp8!r} is not one of: off, " + ", ".join(OPTION)
            )
        self.requested = OPTION.get(fp8, str(requested))
        self._loss: dict[int, list[float]] = {}
        self._ended: dict[int, float] = {}
        self._saved: dict[tuple[str, int], int] = {}  # storage -> bytes, in the probed step
        self._params: set[tuple[str, int]] = set()
        self._hooks: saved_tensors_hooks | None = None
        self._activation_bytes: int | None = None
        self._step = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._params = {_storage_key(p) for p in pl_module.parameters()}
        if _on_cuda(trainer):
            torch.cuda.reset_peak_memory_stats(trainer.strategy.root_device)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._step = trainer.global_step + 1  # the optimizer step this batch is part of
        if self._activation_bytes is None and self._hooks is None:
            self._hooks = saved_tensors_hooks(self._pack, _unpack)
            self._hooks.__enter__()

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        self._stop_counting()  # the forward pass is over: everything backward needs is saved

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._stop_counting()  # in case no backward ran (a skipped step)
        if _on_cuda(trainer):
            torch.cuda.synchronize(trainer.strategy.root_device)  # time finished work only
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        # Lightning hands back the loss divided by accumulate_grad_batches (what backward got).
        self._loss.setdefault(self._step, []).append(float(loss) * trainer.accumulate_grad_batches)
        self._ended[self._step] = time.perf_counter()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            path = Path(trainer.default_root_dir) / PROBE_FILE
            path.write_text(json.dumps(self.record(trainer), indent=1) + "\n")

    def record(self, trainer: L.Trainer) -> dict[str, Any]:
        """What the run leaves for the report (non-finite losses as null: JSON has no NaN)."""
        steps = sorted(self._loss)
        losses = [sum(v) / len(v) for v in (self._loss[s] for s in steps)]
        timed = max(0, len(steps) - 1)  # steps 2..N: the first one pays for warm-up
        elapsed = self._ended[steps[-1]] - self._ended[steps[0]] if timed > 0 else 0.0
        cuda = _on_cuda(trainer)
        device = trainer.strategy.root_device
        return {
            "precision_requested": self.requested,
            "precision_effective": _effective(trainer),
            "device": torch.cuda.get_device_name(device) if cuda else _cpu_name(),
            "processes": trainer.world_size,
            "steps": steps,
            "loss": [x if x == x and abs(x) != float("inf") else None for x in losses],
            "timed_steps": timed,
            "steps_per_s": timed / elapsed if elapsed > 0 else None,
            "activation_bytes": self._activation_bytes,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        }

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = _storage_key(tensor)
        if key not in self._params:  # views of one storage count once
            self._saved[key] = tensor.untyped_storage().nbytes()
        return tensor

    def _stop_counting(self) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None
            self._activation_bytes = sum(self._saved.values())
            self._saved.clear()


def _effective(trainer: L.Trainer) -> str:
    """Lightning's precision, plus the float8 layers torchao put in (precision=fp8)."""
    float8 = describe(trainer.lightning_module)
    return f"{trainer.precision} + {float8}" if float8 else str(trainer.precision)


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    return str(tensor.device), tensor.untyped_storage().data_ptr()


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _on_cuda(trainer: L.Trainer) -> bool:
    return trainer.strategy.root_device.type == "cuda"


def _cpu_name() -> str:
    threads = torch.get_num_threads()
    return f"CPU ({platform.machine()}, {threads} thread{'s' if threads != 1 else ''})"
