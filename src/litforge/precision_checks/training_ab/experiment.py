"""Precision A/B: the same run in float32 and in each mixed precision, then one report.

`python train.py experiment=precision_ab` (conf/experiment/precision_ab.yaml) sweeps the
precision group over `32` and the precisions in `precision_ab.compare`. Each job's
`PrecisionProbe` (litforge.precision_checks.training_ab.probe) writes `precision_probe.json` into its run
directory; once the sweep is over `PrecisionReport`, a Hydra callback, writes
`precision_ab.md`, `precision_ab.json` and `precision_ab.png` into the sweep directory.
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from litforge.errors import ConfigError
from litforge.exits import report_user_errors
from litforge.precision.fp8.cards import refusal
from litforge.precision_checks.training_ab.compare import Gap, align, compare, trailing_mean
from litforge.precision_checks.training_ab.probe import PROBE_FILE
from litforge.precision_checks.training_ab.settings import PrecisionABSettings
from litforge.precision_checks.training_ab.write import markdown, plot
from litforge.validation import schema

REFERENCE = "32"
OUTPUTS = ("precision_ab.md", "precision_ab.json", "precision_ab.png")


def mixed_precisions(accelerator: str) -> list[str]:
    """The mixed precisions this machine runs as asked: bf16-mixed where bfloat16 works,
    16-mixed on a CUDA GPU only (on CPU Lightning would run it as bf16-mixed again), and
    fp8 where torchao is installed and the card has FP8 tensor cores (a CPU runs float8
    through torch._scaled_mm, slowly but exactly as asked)."""
    if accelerator not in ("auto", "gpu", "cuda") or not torch.cuda.is_available():
        return ["bf16-mixed", *_fp8(None)]
    if not torch.cuda.is_bf16_supported():
        return ["16-mixed"]
    return ["bf16-mixed", "16-mixed", *_fp8(torch.cuda.get_device_capability())]


def _fp8(capability: tuple[int, int] | None) -> list[str]:
    """["fp8"] where this machine trains in float8 (capability None: on the CPU)."""
    if importlib.util.find_spec("torchao") is None:
        return []
    return ["fp8"] if capability is None or refusal("", capability) is None else []


def sweep_values(compare: Any, accelerator: str) -> str:
    """hydra.sweeper.params.precision: float32 first, then the precisions compared with it.
    `32` is quoted: unquoted, Hydra reads it as a number, which no config group accepts."""
    chosen = mixed_precisions(accelerator) if compare == "auto" else [str(p) for p in compare]
    others = [p for p in dict.fromkeys(chosen) if p != REFERENCE]
    return ",".join([f"'{REFERENCE}'", *others])


# Resolved when the sweeper reads its params, after Hydra has imported this module to
# build the callback below (conf/experiment/precision_ab.yaml names both).
OmegaConf.register_new_resolver("litforge.precision_ab", sweep_values, replace=True)


class PrecisionReport(Callback):
    """Checks `precision_ab.*` before the first job; writes the report after the last."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        with report_user_errors():
            check(config)
        sweep_dir = Path(config.hydra.sweep.dir)
        # A rerun into the same (stable) sweep directory must not report an older job, and
        # keeps the older report instead of overwriting it.
        for stale in sweep_dir.glob(f"*/{PROBE_FILE}"):
            stale.unlink()
        keep_previous_report(sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        runs = load_runs(sweep_dir)
        settings = PrecisionABSettings.of(config)
        report = build_report(runs, settings.threshold, settings.smooth_steps, config)
        if report is None:
            print(f"precision A/B: no float32 run in {sweep_dir}; nothing to compare", flush=True)
            return
        (sweep_dir / "precision_ab.json").write_text(json.dumps(report, indent=1) + "\n")
        text = markdown(report)
        (sweep_dir / "precision_ab.md").write_text(text)
        plot(report, sweep_dir / "precision_ab.png")
        table = [line for line in text.splitlines() if line.startswith("|")]
        print("\n".join(["", *table, f"precision A/B: {sweep_dir}/precision_ab.{{md,json,png}}"]))


def check(config: DictConfig) -> None:
    """The `precision_ab.*` keys against their schema rules, and enough steps to smooth
    over: one line for the first problem."""
    plain = {"precision_ab": OmegaConf.to_container(config.precision_ab, resolve=True)}
    for key, value, reason in schema.problems(plain):
        raise ConfigError(f"{key}={value} is invalid; {reason}")
    window = PrecisionABSettings.of(config).smooth_steps
    steps = config.get("trainer", {}).get("max_steps")
    if isinstance(steps, int) and 0 <= steps < window:  # -1: counted in epochs, known later
        fewer = f" or precision_ab.smooth_steps<={steps}" if steps else ""
        raise ConfigError(
            f"trainer.max_steps={steps} is fewer than precision_ab.smooth_steps={window}, too "
            f"few steps for a verdict; set trainer.max_steps>={window}{fewer}"
        )


def keep_previous_report(sweep_dir: Path) -> Path | None:
    """Move an earlier report out of the way, into previous/<its time>/; say where."""
    found = [sweep_dir / name for name in OUTPUTS if (sweep_dir / name).is_file()]
    if not found:
        return None
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(found[0].stat().st_mtime))
    target = sweep_dir / "previous" / stamp
    target.mkdir(parents=True, exist_ok=True)
    for path in found:
        path.replace(target / path.name)
    print(f"precision A/B: the previous report moved to {target}", flush=True)
    return target


def load_runs(sweep_dir: Path) -> list[dict[str, Any]]:
    """Each job's probe record (with its run_dir), in job order."""
    runs = []
    for path in sweep_dir.glob(f"*/{PROBE_FILE}"):
        record = json.loads(path.read_text())
        record["run_dir"] = str(path.parent)
        runs.append(record)
    return sorted(runs, key=lambda r: _job_order(Path(r["run_dir"]).name))


def build_report(
    runs: list[dict[str, Any]], threshold: float, window: int, config: DictConfig | None = None
) -> dict[str, Any] | None:
    """The report as plain data (what precision_ab.json holds); None without a float32 run."""
    reference = next((r for r in runs if r["precision_requested"] == REFERENCE), None)
    if reference is None:
        return None
    rows = []
    for run in [reference, *(r for r in runs if r is not reference)]:
        row = {key: run.get(key) for key in _RUN_KEYS}
        smoothed = trailing_mean([_nan(x) for x in run["loss"]], window)
        row["final_loss"] = _finite(smoothed[-1]) if smoothed else None
        if run is reference:
            row.update(gap=None, tracks=None, verdict="reference")
        else:
            row.update(_gap_fields(reference, run, threshold, window))
        rows.append(row)
    return {
        "reference": REFERENCE,
        "threshold": threshold,
        "smooth_steps": window,
        "steps": len(reference["steps"]),
        "device": reference.get("device"),
        **_subject(config),
        "precisions": rows,
    }


_RUN_KEYS = (
    "precision_requested", "precision_effective", "run_dir", "steps_per_s", "timed_steps",
    "activation_bytes", "peak_memory_bytes", "processes", "steps", "loss",
)  # fmt: skip


def _gap_fields(
    reference: dict[str, Any], run: dict[str, Any], threshold: float, window: int
) -> dict[str, Any]:
    steps, ref, other = align(reference["steps"], reference["loss"], run["steps"], run["loss"])
    if not steps:
        return {"gap": None, "tracks": None, "verdict": "no verdict: no step in common"}
    gap: Gap = compare(steps, ref, other, threshold, window)
    largest, at = gap.largest
    return {
        "gap": {
            "final": _finite(gap.final),
            "largest": _finite(largest),
            "largest_step": at,
            "exceeded_at": gap.exceeded_at,
            "steps": gap.steps,
            "values": [_finite(g) for g in gap.gap],
        },
        "tracks": gap.tracks if gap.decided else None,
        "verdict": gap.verdict(),
    }


def _subject(config: DictConfig | None) -> dict[str, Any]:
    """What was trained: model and data classes, and the seed."""
    if config is None:
        return {}
    return {
        "model": str(config.model._target_).rsplit(".", 1)[-1],
        "data": str(config.data._target_).rsplit(".", 1)[-1],
        "seed": config.seed,
    }


def _job_order(name: str) -> tuple[bool, int, str]:
    """Job numbers in numeric order (10 after 9); other directory names after them."""
    return (not name.isdigit(), int(name) if name.isdigit() else 0, name)


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def _finite(x: float) -> float | None:
    """JSON has no NaN or infinity: null stands for 'not finite'."""
    return x if math.isfinite(x) else None
