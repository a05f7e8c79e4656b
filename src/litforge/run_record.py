"""What a run leaves in its run directory besides Lightning's own files.

run_dir/
  config.yaml     the resolved config (no interpolations left)
  run.json        command line, git commit and dirty flag, start time, host; callbacks add
                  their facts with `update` (the step breakdown's shares: step_breakdown)
  metrics.json    final metrics as logged, plus requested and effective precision
"""

from __future__ import annotations

import json
import math
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from litforge import console, hooks
from litforge.callbacks.early_stopping import best_if_stopped
from litforge.callbacks.epoch_log import epoch_scalars
from litforge.errors import ConfigError
from litforge.precision import effective_precision


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state() -> dict[str, Any]:
    commit = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no")) if commit else None
    return {"git_commit": commit, "git_dirty": dirty}


@rank_zero_only
def write_start(run_dir: Path, cfg: DictConfig) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    except OSError as err:
        raise ConfigError(
            f"run directory {run_dir} is not writable ({type(err).__name__}: {err.strerror}); "
            "pick another with hydra.run.dir=PATH or free some space"
        ) from err
    record = {
        "command": shlex.join(["python", *sys.argv]),
        **git_state(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
    }
    devices = trial_devices()
    if devices is not None:
        record["devices"] = devices
    (run_dir / "run.json").write_text(json.dumps(record, indent=2) + "\n")


# Set for a sweep trial by hydra/launcher=gpus (litforge.sweeps.pool): the launcher's ids of
# the trial's devices, and the GPUs' UUIDs.
TRIAL_DEVICES_ENV = "LITFORGE_TRIAL_DEVICES"
TRIAL_DEVICE_UUIDS_ENV = "LITFORGE_TRIAL_DEVICE_UUIDS"


def trial_devices() -> dict[str, Any] | None:
    """The devices a launcher gave this run (None when none did)."""
    ids = os.environ.get(TRIAL_DEVICES_ENV)
    if ids is None:
        return None
    return {
        "ids": [int(i) for i in ids.split(",") if i],
        "uuids": [u for u in os.environ.get(TRIAL_DEVICE_UUIDS_ENV, "").split(",") if u],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


def as_float(value: Any) -> float | None:
    """Tensor or number -> float; NaN and inf become None (JSON has no spelling for them)."""
    number = float(value)
    return number if math.isfinite(number) else None


def floats(values: Mapping[str, Any]) -> dict[str, float | None]:
    """Logged metrics (tensors or numbers) -> {name: float or None}."""
    return {name: as_float(value) for name, value in values.items()}


def final_metrics(
    trainer: L.Trainer, precision_requested: str, best_checkpoint: str | None
) -> dict[str, Any]:
    """What metrics.json holds beside the logged metrics: what each callback reports (its
    `final_metrics(trainer)`: early stopping's best value, the effective batch), the best
    checkpoint, the precision asked for and the one that ran, and where fit ended."""
    found: dict[str, Any] = {}
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        report = hooks.final_metrics_of(callback)
        if report is not None:
            found.update(report(trainer))
        elif isinstance(callback, EarlyStopping):  # Lightning's own, as users configure it
            found.update(best_if_stopped(callback, trainer))
    return found | {
        "best_checkpoint": best_checkpoint,
        "precision_requested": precision_requested,
        "precision_effective": effective_precision(trainer),
        "global_step": trainer.global_step,
        "epoch": trainer.current_epoch,
    }


@rank_zero_only
def update(run_dir: Path, **fields: Any) -> None:
    """Add `fields` to run.json (written at the start of the run)."""
    path = Path(run_dir) / "run.json"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        record = {}
    except (OSError, ValueError, RecursionError) as err:  # torn by a crash, or changed
        record = {}
        console.warn("%s is unreadable (%s); written again with this run's facts from here on",
                     path, type(err).__name__)  # fmt: skip
    if not isinstance(record, dict):
        console.warn("%s is not a JSON object; written again with this run's facts from here on",
                     path)  # fmt: skip
        record = {}
    record.update(fields)
    path.write_text(json.dumps(record, indent=2) + "\n")


def process_age_s() -> float:
    """Seconds since this process started (Linux: its start time in /proc; elsewhere, since
    litforge was imported)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


_IMPORTED = time.monotonic()


# Keys metrics.json holds beside the logged metrics that are not a model's figures.
_BOOKKEEPING = frozenset({"global_step", "epoch"})


def write_metrics(run_dir: Path, metrics: dict[str, Any]) -> None:
    """metrics.json, then one line with every metric the run logged, whatever its name
    (`test_loss` as well as `test/loss`; a single batch's `X_step` left out), and where the
    run lives."""
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    figures = {k: v for k, v in metrics.items() if isinstance(v, float) and k not in _BOOKKEEPING}
    summary = ", ".join(f"{k}={v:.4g}" for k, v in epoch_scalars(figures).items())
    console.info("finished: %s", summary)
    console.info("run directory: %s", run_dir.resolve())
