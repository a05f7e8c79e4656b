"""Why is the GPU idle: the share of step time spent waiting for the next batch.

Two timer reads per training batch, no device synchronisation: the wait is the time from
the end of one batch's hooks to the start of the next (the DataLoader's `next()`, and
Lightning's own work between them), the step the time from one start to the next. On
CUDA the two reads are CUDA events, so the wait is the time the GPU itself sat idle
between the batches (the CPU runs ahead of the GPU, and its clock would count a fetch the
GPU never waited for); the events are read only when the share is logged. The share is
the median wait over the median step since the last log point, so an occasional long
gap (a checkpoint save, a validation) does not count as waiting for data.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from litforge import console, hooks


class DataWait:
    """Collects waits and steps between log points; `share()` reads and resets them."""

    def __init__(self, device: torch.device, warn_share: float) -> None:
        self.cuda = device.type == "cuda"
        self.warn_share = warn_share
        self.warned = False
        self._marks: list[tuple[Any, Any]] = []  # (batch start, batch end) per batch
        self._last_end: Any = None
        self._starts = 0

    def _mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def batch_start(self) -> None:
        self._marks.append((self._last_end, self._mark()))

    def batch_end(self) -> None:
        self._last_end = self._mark()

    def skip(self) -> None:
        """After a validation: the next wait includes it, so it is not counted."""
        self._last_end = None

    def share(self) -> float | None:
        """The waiting share of the time since the last call (None: no full step yet)."""
        pairs, self._marks = self._marks, self._marks[-1:]
        waits, steps = [], []
        for (_, before), (end, start) in zip(pairs, pairs[1:], strict=False):
            if end is not None:
                waits.append(_seconds(end, start, self.cuda))
                steps.append(_seconds(before, start, self.cuda))
        if not steps or statistics.median(steps) <= 0:
            return None
        return statistics.median(waits) / statistics.median(steps)

    def advise(self, share: float, loader: Any) -> None:
        """Once per run, above `warn_share`: what to try, with the loader's settings."""
        if self.warned or share <= self.warn_share:
            return
        self.warned = True
        settings = ", ".join(
            f"{name}={getattr(loader, name, '?')}"
            for name in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor")
        )
        console.warn(
            "throughput: %.0f%% of each training step waits for the next batch (the "
            "DataLoader has %s). Try data.num_workers=N (the CPU cores to spare), "
            "pin_memory=True and persistent_workers=True on the DataLoader, a larger "
            "prefetch_factor, or preparing the data once ahead of training "
            "(callbacks.throughput.data_wait_warn=%g sets this threshold)%s",
            100 * share, settings, self.warn_share, _dataset_advice(loader),
        )  # fmt: skip


def _dataset_advice(loader: Any) -> str:
    """What the dataset itself says to try (a streamed one names its knobs), if anything."""
    advice = hooks.stall_advice_of(getattr(loader, "dataset", None))
    return f". {advice()}" if callable(advice) else ""


def _seconds(a: Any, b: Any, cuda: bool) -> float:
    if cuda:
        b.synchronize()
        return a.elapsed_time(b) / 1000
    return b - a
