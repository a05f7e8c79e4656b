"""Figure 4, checkpoint stall: how long training waits on a checkpoint save, and what
checkpointing at the default interval costs a whole training run.

Blocking time is the wall-clock time of each `StoreCheckpoint.save` (as the callback
records it in `timings`) in real training runs: local disk, and the S3 test server with
synchronous and asynchronous upload, for the digits CNN and the gpt_char GPT. The overhead
share is the CPU time in the saves over the rest of training's CPU time, inside runs of
the default digits experiment. Method and measurement history: docs/performance.md.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import lightning as L

from benchmarks.harness import scratch_dir
from benchmarks.stats import MIN_REPEATS, Figure, interleaved, ratios
from litforge.checkpointing.callback import SaveTiming, StoreCheckpoint
from litforge.cli import compose
from litforge.training import train

BUCKET = "litforge"
DIGITS_EPOCH = 19  # optimizer steps per digits epoch (1,197 images, batch 64)
SHARE_EPOCHS = 8  # epochs per overhead-share run
BLOCK_EPOCHS = 3  # digits epochs (= saves) per blocking-time run
GPT_SAVES = 3  # gpt_char steps (= saves, one per step) per blocking-time run
SIDES: dict[str, list[str]] = {
    "local_sync": [],
    "s3_sync": [f"checkpoint.dir=s3://{BUCKET}/bench"],
    "s3_async": [f"checkpoint.dir=s3://{BUCKET}/bench", "checkpoint.async_upload=true"],
}


class SaveTimings(L.Callback):
    """Copies the run's `StoreCheckpoint.timings` (one per save that wrote a checkpoint).

    It is added through the config (`+callbacks.save_timings._target_=...`), and since
    `train(cfg)` returns only metrics, it leaves the copy in the class attribute `last`.
    It copies at teardown, after every hook of the fit (the final save's included).
    """

    last: ClassVar[list[SaveTiming]] = []

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        SaveTimings.last = [
            timing
            for callback in trainer.callbacks
            if isinstance(callback, StoreCheckpoint)
            for timing in callback.timings
        ]


@contextlib.contextmanager
def s3_server() -> Iterator[Any]:
    """The moto S3 server of the tests on 127.0.0.1, with AWS_* set in this process only."""
    import fsspec

    from tests.s3server import S3Server

    log_dir = Path(tempfile.mkdtemp(prefix="litforge-bench-moto-"))
    server = S3Server(log_dir)
    saved = {key: os.environ.get(key) for key in server.env()}
    try:
        server.start((BUCKET,))
        os.environ.update(server.env())
        fsspec.filesystem("s3").clear_instance_cache()
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        with contextlib.suppress(Exception):
            fsspec.filesystem("s3").clear_instance_cache()  # no session to a stopped server
        shutil.rmtree(log_dir, ignore_errors=True)


def _empty_bucket(server: Any) -> None:
    """Moto holds objects in memory: drop each run's checkpoints once it is measured."""
    client = server.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


def _run(overrides: list[str], server: Any) -> list[SaveTiming]:
    """The saves of one `train(cfg)` as `python train.py` runs it under CI, in order."""
    run_dir = scratch_dir()
    timings = f"+callbacks.save_timings._target_={__name__}.SaveTimings"
    cfg = compose([*overrides, timings, "test=false", "resume=never"], run_dir)
    gc.collect()
    SaveTimings.last = []
    train(cfg)
    shutil.rmtree(run_dir, ignore_errors=True)
    _empty_bucket(server)
    return SaveTimings.last


def _blocking(
    base: list[str], server: Any, repeats: int
) -> tuple[dict[str, list[float]], dict[str, list[SaveTiming]]]:
    """Per side: the median blocking ms of each run, and every save's `SaveTiming`."""
    every: dict[str, list[SaveTiming]] = {side: [] for side in SIDES}

    def side(name: str) -> Callable[[], float]:
        def one() -> float:
            saves = _run([*base, *SIDES[name]], server)
            every[name].extend(saves)
            return statistics.median(save.wall_s * 1e3 for save in saves)

        return one

    for name in SIDES:  # warm-up: first-call costs (s3fs session, imports) stay out
        _run([*base, *SIDES[name]], server)
    return interleaved({name: side(name) for name in SIDES}, repeats), every


class EpochClock(L.Callback):
    """(CPU s, wall s) at each training epoch start and at the end of training."""

    marks: ClassVar[list[tuple[float, float]]] = []

    def _mark(self, *args: Any) -> None:
        EpochClock.marks.append((time.process_time(), time.perf_counter()))

    on_train_epoch_start = on_train_end = _mark


def _share(server: Any, repeats: int) -> dict[str, Figure]:
    clock = [f"+callbacks.epoch_clock._target_={__name__}.EpochClock"]
    wall: dict[str, list[float]] = {"checkpoint": [], "none": []}
    in_run: list[float] = []  # per checkpointing run: save CPU / the rest of training's CPU

    def side(name: str, extra: list[str]) -> Callable[[], float]:
        def one() -> float:
            """Median CPU s of one epoch (training, validation, save) in an 8-epoch run."""
            EpochClock.marks = []
            saves = _run([f"trainer.max_epochs={SHARE_EPOCHS}", *clock, *extra], server)
            cpu, walls = zip(*EpochClock.marks, strict=True)
            if saves:
                saving = sum(save.cpu_s for save in saves)
                in_run.append(saving / (cpu[-1] - cpu[0] - saving))
            wall[name].append(statistics.median(b - a for a, b in itertools.pairwise(walls)))
            return statistics.median(b - a for a, b in itertools.pairwise(cpu))

        return one

    sides = {"checkpoint": side("checkpoint", []), "none": side("none", ["checkpoint=none"])}
    for one in sides.values():
        one()  # warm-up
    for walls in wall.values():
        walls.clear()
    in_run.clear()
    values = interleaved(sides, repeats)
    epoch_ms = {k: round(statistics.median(v) * 1e3, 2) for k, v in values.items()}
    return {
        "ckpt_overhead_share": Figure.of(
            in_run,
            "of training time",
            "<= 0.03",
            note="digits, default checkpoint config (local disk, a save each epoch): CPU time "
            "in the saves / CPU time of the rest of training, accounted inside each run",
            extra={"epochs": SHARE_EPOCHS},
        ),
        "ckpt_overhead_share_ab": Figure.of(
            [r - 1 for r in ratios(values, "checkpoint", "none")],
            "of training time",
            note="the same, A/B: default checkpoint config vs checkpoint=none, extra CPU "
            "time per epoch as a fraction (interleaved runs; spread wider than the effect)",
            extra={
                "cpu_ms_per_epoch_median": epoch_ms,
                "wall_share_median": statistics.median(
                    a / b - 1 for a, b in zip(wall["checkpoint"], wall["none"], strict=True)
                ),
                "epochs": SHARE_EPOCHS,
            },
        ),
    }


def _block_figures(
    prefix: str, what: str, values: dict[str, list[float]], every: dict[str, list[SaveTiming]]
) -> dict[str, Figure]:
    figures = {}
    for name in SIDES:
        where, mode = name.split("_")
        ms = [save.wall_s * 1e3 for save in every[name]]
        figures[f"ckpt_block_ms_{prefix}{name}"] = Figure.of(
            values[name],
            "ms",
            note=f"{what}: wall ms the training thread blocks per save, "
            f"{'local disk' if where == 'local' else 'S3 test server'}, {mode} upload",
            extra={
                "saves": len(ms),
                "all_saves_ms_min_max": [round(min(ms), 2), round(max(ms), 2)],
                "checkpoint_bytes": max((save.bytes for save in every[name]), default=None),
            },
        )
    figures[f"ckpt_{prefix}async_vs_sync_s3"] = Figure.of(
        ratios(values, "s3_async", "s3_sync"),
        "x sync",
        note=f"{what}: blocking ms per save, async / sync upload to S3 (wall clock)",
    )
    return figures


def measure(repeats: int = MIN_REPEATS) -> dict[str, Figure]:
    cnn = [f"trainer.max_steps={BLOCK_EPOCHS * DIGITS_EPOCH}"]  # the default experiment
    gpt = ["experiment=gpt_char", f"trainer.max_steps={GPT_SAVES}"]
    gpt.append("checkpoint.every_n_train_steps=1")
    with s3_server() as server:
        return {
            **_block_figures("", "digits CNN", *_blocking(cnn, server, repeats)),
            **_share(server, repeats),
            **_block_figures("gpt_", "gpt_char GPT", *_blocking(gpt, server, repeats)),
        }
