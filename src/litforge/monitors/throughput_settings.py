"""callbacks.throughput.*: the throughput callback's keyword arguments, their defaults and
rules (litforge.monitors.throughput.ThroughputMFU takes its defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass

from litforge.settings import Settings, key
from litforge.settings.rules import Int, Num


@dataclass(frozen=True)
class ThroughputSettings(Settings):
    """Training throughput into the loggers, every trainer.log_every_n_steps steps:
    train/device/samples_per_sec, items_per_sec (tokens/s, for batches of token ids),
    flops_per_sec, mfu (GPU; PaLM's: model FLOPs, no recomputation), hfu (recomputation
    included), and train/device/peak_memory_gib once an epoch (GPU). FLOPs are measured once
    on meta tensors; the peak comes from litforge.planning.hardware (a card it lacks: a
    warning). train/data_wait_share: the share of each step spent waiting for the next batch."""

    GROUP = "callbacks.throughput"
    TITLE = "callbacks.throughput"
    GROUP_FILE = "callbacks/throughput.yaml"
    NODE = "throughput"
    TARGET = "litforge.monitors.throughput.ThroughputMFU"

    available_flops: float | None = key(
        None,
        Num(0.0, float("inf"), open_hi=True, null=True),  # finite: an infinite peak is a typo
        "dense peak FLOP/s per device (e.g. 989.4e12); null: the card table; 0: no MFU",
        error="{key}={value!r} must be a number of FLOP/s per device >= 0 (e.g. 989.4e12), "
        "0 to log no MFU, or null to use litforge.planning.hardware's table",
    )
    window_size: int = key(
        3,
        Int(2),
        "logging points the rates average over (>= 2)",
        error="{key}={value!r} {reason} (logging points the rates average over)",
    )
    data_wait_warn: float = key(
        0.25,
        Num(0.0, 1.0, open_lo=True),
        "train/data_wait_share above this: one warning with what to try",
        error="{key}={value!r} must be a share of step time in (0, 1] (1: never warn)",
    )
