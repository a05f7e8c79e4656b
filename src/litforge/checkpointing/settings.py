"""checkpoint.* (where and when checkpoints are written) and restore.* (starting from
another run's checkpoint): the keys, their defaults, their rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litforge.errors import ConfigError
from litforge.settings import Settings, key
from litforge.settings.rules import Bool, Free, Int, Num, OneOf, Text


@dataclass(frozen=True)
class CheckpointSettings(Settings):
    """Where and when checkpoints are written (litforge.checkpointing.callback.StoreCheckpoint).
    `dir` is a local path or any fsspec URL: s3://bucket/prefix (S3 or any S3-compatible
    store, configured by the standard AWS_* environment variables), gs://..., az://...,
    file://... A run's checkpoints go to dir itself when dir lies inside the run directory
    (the default), else to dir/<run_name> (or dir/<run directory name> for unnamed runs).
    `checkpoint=none` turns checkpoints off."""

    GROUP = "checkpoint"
    TITLE = "checkpoint"
    GROUP_FILE = "checkpoint/default.yaml"

    dir: str = key(
        "${run_dir}/checkpoints",
        Text(r".*\S.*", "a local path or an fsspec URL such as s3://BUCKET/prefix"),
        "a local path or an fsspec URL (s3://BUCKET/prefix, gs://..., az://...)",
    )
    every_n_train_steps: int | None = key(
        None, Int(1, null=True), "also save every N optimizer steps"
    )
    train_time_interval: float | None = key(
        None, Num(0.0, open_lo=True, null=True), "also save every T minutes of training"
    )
    save_on_validation: bool = key(
        True, Bool(), "save after each validation (epoch end by default)"
    )
    keep_last: int = key(2, Int(1), "newest K, plus the best by monitor, are kept")
    monitor: str | None = key(
        "${optimized_metric}", Text(null=True), "the metric the best checkpoint is picked by"
    )
    mode: str = key(
        "${optimized_mode}", OneOf(("min", "max")), "min for a loss, max for an accuracy"
    )
    async_upload: bool = key(False, Bool(), "true: upload on a background thread, training goes on")
    upload_retries: int = key(
        3,
        Int(1),
        "whole-upload attempts (file + marker, doubling backoff) before it stays staged, retried before each later save; per-request retries are s3fs's/botocore's (storage_options)",
    )
    final_upload_timeout_s: float = key(
        120, Num(0.0), "at the end, how long to wait for uploads and retry an unreachable store"
    )
    timeout_s: float = key(
        10,
        Num(0.0, open_lo=True),
        "a store that does not answer: bound on each request (S3 connect and read), on the start-up probe, and on how long a save waits for its upload before training goes on",
    )
    storage_options: dict[str, Any] = key(
        {},
        Free(),
        "keyword arguments of the fsspec filesystem, e.g. {config_kwargs: {connect_timeout: 5, retries: {max_attempts: 3}}}; never credentials (they come from the environment)",
    )

    @classmethod
    def check_across(cls, plain: dict[str, Any]) -> None:
        monitor = (plain.get("checkpoint") or {}).get("monitor")
        metrics = plain.get("optimized_metric")
        # A list optimized_metric (a multi-objective sweep) cannot rank checkpoints, which
        # `checkpoint.monitor: ${optimized_metric}` would ask of it.
        if isinstance(metrics, list) and isinstance(monitor, list):
            raise ConfigError(
                f"optimized_metric=[{', '.join(map(str, metrics))}] is a list (a multi-objective sweep), but "
                "checkpoints are ranked by one metric: set checkpoint.monitor to one of them "
                "(and checkpoint.mode), or checkpoint.monitor=null to keep the newest only"
            )  # fmt: skip
        # Checkpoints ranked by a validation metric need validation to run.
        limit = (plain.get("trainer") or {}).get("limit_val_batches")
        if monitor and str(monitor).startswith("val/") and limit is not None and limit == 0:
            raise ConfigError(
                f"trainer.limit_val_batches={limit} runs no validation, but checkpoints are ranked "
                f"by checkpoint.monitor={monitor}; allow validation, or set checkpoint.monitor=null "
                "to keep the newest checkpoints only"
            )

    staging_dir: str = key(
        "${run_dir}/checkpoint-staging", Text(), "local copies waiting for upload"
    )


@dataclass(frozen=True)
class RestoreSettings(Settings):
    """Start from another run's checkpoint while this run has none of its own."""

    GROUP = "restore"
    TITLE = "restore"
    GROUP_FILE = "litforge/settings.yaml"

    mode: str | None = key(
        None,
        OneOf(("finetune", "hotstart", "continue"), null=True),
        "finetune: weights only | hotstart: weights + optimizer state | continue: all (= ckpt_path)",
    )
    # `from` is a Python keyword: the field is from_, the key `restore.from`.
    from_: str | None = key(
        None, Text(null=True), "the checkpoint: a file or any fsspec URL (s3://...)", name="from"
    )
    strict: bool = key(True, Bool(), "false: load the weights that fit, list the rest (a new head)")
