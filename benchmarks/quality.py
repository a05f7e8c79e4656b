"""Figure 5, time to quality: what the shipped experiments reach on a CPU-time budget.

Each experiment is built and trained by the template as `python train.py experiment=...`
would (its config, module, default callbacks and logger, Trainer settings), on one
thread, plus one callback that stops training once the fit has used its CPU-time
budget. Checkpoint writing (`litforge.checkpointing`) is left out: it does not change
what the model learns, and its few saves per run cost little CPU time. The figure is the validation metric
of the final weights (`trainer.validate`), so a run cut mid-schedule is judged as is.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import lightning as L

from benchmarks.harness import scratch_dir
from benchmarks.stats import Figure
from litforge import build
from litforge.cli import compose

EXPERIMENTS: dict[str, dict[str, Any]] = {
    "quality_digits_acc": {
        "experiment": "digits_cnn", "budget_s": 30.0, "metric": "val/acc",
        "scale": 100.0, "unit": "% val acc", "goal": ">= 97",
    },
    "quality_gpt_char_loss": {
        "experiment": "gpt_char", "budget_s": 60.0, "metric": "val/loss",
        "scale": 1.0, "unit": "nats/char val", "goal": "<= 1.5",
    },
}  # fmt: skip


class CpuTimeBudget(L.Callback):
    """Stops training after the step that brings the fit past `seconds` of CPU time."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = 0.0
        self.used = 0.0

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start = time.process_time()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.used = time.process_time() - self.start
        if self.used >= self.seconds:
            trainer.should_stop = True


def run_experiment(experiment: str, budget_s: float) -> tuple[dict[str, float], int, float]:
    """Train on the budget; returns (final validation metrics, steps, CPU seconds used)."""
    run_dir = scratch_dir()
    cfg = compose([f"experiment={experiment}"], run_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule, module = build.build_datamodule(cfg), build.build_module(cfg)
    budget = CpuTimeBudget(budget_s)
    trainer = build.build_trainer(cfg, [budget], datamodule)  # configured callbacks, loggers
    trainer.fit(module, datamodule=datamodule)
    metrics = trainer.validate(module, datamodule=datamodule, verbose=False)[0]
    shutil.rmtree(run_dir, ignore_errors=True)
    return metrics, trainer.global_step, budget.used


def measure() -> dict[str, Figure]:
    figures = {}
    for name, spec in EXPERIMENTS.items():
        metrics, steps, used = run_experiment(spec["experiment"], spec["budget_s"])
        value = float(metrics[spec["metric"]]) * spec["scale"]
        figures[name] = Figure.of(
            [value],
            spec["unit"],
            spec["goal"],
            note=f"experiment={spec['experiment']}, {spec['budget_s']:.0f} s CPU budget, 1 thread",
            extra={"steps": steps, "cpu_s_used": round(used, 2)},
        )
    return figures
