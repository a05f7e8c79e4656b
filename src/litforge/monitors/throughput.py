"""Training throughput: samples/s, tokens/s, FLOP/s and MFU per device, peak memory per epoch.

The rates are Lightning's (`lightning.fabric.utilities.throughput.Throughput`, the class
behind its `ThroughputMonitor`), logged under the same names with a `train/` prefix:
`train/device/samples_per_sec`, `train/device/items_per_sec` (tokens, for batches of token
ids), `train/device/flops_per_sec`, `train/device/mfu`, and without `device/` the totals
over all processes when there are several. `train/device/peak_memory_gib` is CUDA's peak
allocated memory in each epoch (the maximum over processes).

Not `ThroughputMonitor` itself, because in lightning 2.6.6 it
  * takes its peak FLOP/s from a table that has no entry for "NVIDIA H200" and gives the
    H100 NVL more than twice its dense peak (pytorch-lightning #21677, #20660);
  * calls torch.cuda.synchronize() after every batch, which stops the CPU from queueing
    the next step while the GPU works; here the clock is read (and CUDA synchronized) only
    every `trainer.log_every_n_steps` optimizer steps, when the rates are logged;
  * logs validation and test rates at the evaluation batch index as the step, rows that
    interleave with the training steps of metrics.csv.
Validation time is left out of the training rates, as ThroughputMonitor does.

FLOPs per batch are counted once, on meta tensors (`litforge.planning.flops`); later
batches scale that count by their number of samples.

MFU is PaLM's (Chowdhery et al. 2022, appendix B): model FLOPs only, so a run with gradient
checkpointing is counted as the same run without it; `train/device/hfu` beside it counts
the hardware's FLOPs, the recomputed forward included (the two are equal without
checkpointing). A CUDA card the table does not know trains with one warning and no MFU
until `callbacks.throughput.available_flops` names its peak.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.throughput import Throughput
from lightning.pytorch.utilities.data import extract_batch_size

from litforge import console
from litforge.monitors.data_wait import DataWait
from litforge.monitors.throughput_settings import ThroughputSettings
from litforge.planning.flops import first_tensor, measure_or_warn, token_count
from litforge.planning.hardware import GIB, find_card, peak_dtype
from litforge.tracking.step_metrics import is_logging_step, log_step_metrics

KEY = ThroughputSettings.GROUP


class ThroughputMFU(L.Callback):
    """available_flops: dense peak FLOP/s of one device, overriding `litforge.planning.hardware`'s
    table (null: the table; 0: log no MFU). window_size: how many logging points (one every
    `trainer.log_every_n_steps` optimizer steps) the rates average over, at least 2.
    data_wait_warn: the share of step time spent waiting for the next batch
    (`train/data_wait_share`, `litforge.monitors.data_wait`) above which it says, once,
    what to try."""

    def __init__(
        self,
        available_flops: float | None = ThroughputSettings.available_flops,
        window_size: int = ThroughputSettings.window_size,
        data_wait_warn: float = ThroughputSettings.data_wait_warn,
    ) -> None:
        settings = ThroughputSettings.checked(  # a bad value: one line naming its key
            available_flops=available_flops,
            window_size=window_size,
            data_wait_warn=data_wait_warn,
        )
        flops = settings.available_flops
        self.available_flops = None if flops is None else float(flops)
        self.data_wait_warn = float(settings.data_wait_warn)
        self._wait: DataWait | None = None
        self.window_size = settings.window_size
        self.flops_per_batch: int | None = None  # model FLOPs of the first batch, once measured
        self.hardware_flops_per_batch: int | None = None  # with recomputation, if any
        self._device = torch.device("cpu")
        self._throughput: Throughput | None = None  # None: nothing to measure or log
        self._counting = False  # on_train_start: measuring, on rank 0
        self._val_start: float | None = None
        self._restored: dict[str, Any] = {}  # totals from the checkpoint a run resumes
        self._batches = self._samples = self._tokens = self._flops_since_update = 0
        self._t0 = 0.0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or not trainer.loggers:
            self._throughput = None
            return
        self._device = trainer.strategy.root_device
        cuda = self._device.type == "cuda"
        name = torch.cuda.get_device_name(self._device) if cuda else None
        tf32 = cuda and torch.get_float32_matmul_precision() != "highest"
        peak = resolve_available_flops(name, str(trainer.precision), tf32, self.available_flops)
        if not cuda and self.available_flops is None:
            console.info(
                "throughput: MFU and peak memory are GPU-only; logging samples/s, tokens/s "
                "and FLOP/s (%s.available_flops=FLOP/s sets a peak for MFU)",
                KEY,
            )
        elif peak:
            console.info("throughput: MFU against %.4g TFLOP/s per device (%s)", peak / 1e12, name)
        self._throughput = Throughput(
            available_flops=peak, world_size=trainer.world_size, window_size=self.window_size
        )
        self._wait = DataWait(self._device, self.data_wait_warn)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self._wait is not None and trainer.is_global_zero:
            self._wait.batch_start()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._counting = self._throughput is not None and trainer.is_global_zero  # per batch
        if self._throughput is None:
            return
        self._throughput.reset()
        totals, self._restored = self._restored, {}
        self._batches = int(totals.get("batches", 0))
        self._samples = int(totals.get("samples", 0))
        self._tokens = int(totals.get("tokens", 0))
        self._flops_since_update = 0
        self._first_samples = 0  # the batch size flops_per_batch was measured at
        self._count_tokens = False
        self._t0 = self._now() - float(totals.get("time", 0.0))

    def state_dict(self) -> dict[str, Any]:
        """The totals, so that a resumed run's train/batches, samples, lengths and time go on
        from the checkpoint (plain numbers: checkpoints load with weights_only=True)."""
        if self._throughput is None or not self._t0:
            return {}
        time_so_far = self._now() - self._t0
        return {
            "batches": self._batches,
            "samples": self._samples,
            "tokens": self._tokens,
            "time": time_so_far,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = dict(state_dict)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self._device)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        if not self._counting:
            return
        x = first_tensor(batch)  # the input; Lightning's extract_batch_size walks it all
        samples = int(x.size(0)) if x is not None and x.dim() else extract_batch_size(batch)
        if not self._first_samples:
            self._first_samples = samples
            self._count_tokens = token_count(batch) is not None
            counted = measure_or_warn(pl_module, batch, trainer)
            self.flops_per_batch, self.hardware_flops_per_batch = counted or (None, None)
        if self._wait is not None:  # after the FLOP count: that is no wait for data
            self._wait.batch_end()
        self._batches += 1
        self._samples += samples
        if self._count_tokens and x is not None:
            self._tokens += x.numel()
        if self.flops_per_batch is not None:
            self._flops_since_update += self.flops_per_batch * samples // self._first_samples
        # Lightning's own cadence: once an optimizer step is complete, every
        # log_every_n_steps steps.
        if not is_logging_step(trainer) or trainer.fit_loop._should_accumulate():
            return
        self._throughput.update(
            time=self._now() - self._t0,
            batches=self._batches,
            samples=self._samples,
            lengths=self._tokens if self._count_tokens else None,
            flops=self._flops_since_update if self.flops_per_batch is not None else None,
        )
        self._flops_since_update = 0
        rates = self._throughput.compute()
        if self.flops_per_batch and self.hardware_flops_per_batch:
            ratio = self.hardware_flops_per_batch / self.flops_per_batch
            rates.update({k[:-3] + "hfu": v * ratio for k, v in rates.items() if k.endswith("mfu")})
        metrics = {f"train/{k}": v for k, v in rates.items()}
        share = self._wait.share() if self._wait is not None else None
        if share is not None:
            metrics["train/data_wait_share"] = share
            self._wait.advise(share, trainer.train_dataloader)  # type: ignore[union-attr]
        log_step_metrics(trainer, metrics)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._throughput is not None and trainer.is_global_zero and not trainer.sanity_checking:
            self._val_start = self._now()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._throughput is not None and self._val_start is not None:
            self._t0 += self._now() - self._val_start  # the training clock stood still
            self._val_start = None
        if self._wait is not None:
            self._wait.skip()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._throughput is not None and self._device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self._device) / GIB
            pl_module.log("train/device/peak_memory_gib", peak, reduce_fx="max", sync_dist=True)

    def _now(self) -> float:
        """perf_counter once the device has finished what was queued."""
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        return time.perf_counter()


def resolve_available_flops(
    device_name: str | None, precision: str, tf32: bool, override: float | None
) -> float | None:
    """The peak FLOP/s MFU divides by: `override` if given (0 -> None), else the table's
    dense peak for `device_name` (a CUDA device name; None on CPU, where there is none) at
    the compute dtype of `precision`. A CUDA card or dtype the table lacks: one warning, None."""
    if override is not None:
        return override or None
    if device_name is None:
        return None
    card = find_card(device_name)
    dtype = peak_dtype(precision, tf32 and card is not None and "tf32" in card.peak_tflops)
    peak = card.peak_flops(dtype) if card and dtype else None
    if peak is not None:
        return peak
    if card is None:
        why = f"{device_name!r} is not in litforge.planning.hardware.CARDS"
    else:
        why = f"litforge.planning.hardware has no {dtype or precision} peak for the {card.name}"
    console.warn(
        f"throughput: no MFU: {why}; set {KEY}.available_flops to the card's dense peak "
        f"FLOP/s per device for precision {precision} (e.g. 989.4e12) to log it"
    )
    return None
