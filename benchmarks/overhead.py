"""Figure 1, framework overhead: the template's training vs a hand-written loop.

Three sides per model, each the CPU time per optimizer step (slope between a short and
a long run, so start-up cancels):
  template  `litforge.training.train(cfg)` as `python train.py` runs it under CI: default
            callbacks (checkpointing, LR monitor, epoch log lines) and the CSV logger
  lightning Lightning's minimal Trainer on the same LightningModule and DataModule: no
            logger, no checkpointing, no callbacks, no model summary, no progress bar
  raw       `benchmarks.rawloop.fit`: the same work in plain PyTorch
Validation runs on the experiment's schedule on every side; the raw loop also writes the
CSV log and best/last checkpoints, so `lightning` does less file work than the other two.
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L

from benchmarks import rawloop
from benchmarks.harness import scratch_dir
from benchmarks.stats import MIN_REPEATS, Figure, interleaved, per_step, ratios
from litforge import build
from litforge.cli import compose
from litforge.training import train

# Step counts of the short and long run. Digits has 19 batches per epoch and validates
# and checkpoints each epoch, so both counts end an epoch and the slope carries the
# per-epoch work in proportion. gpt_char validates every 200 steps: none in between.
MODELS: dict[str, dict[str, Any]] = {
    "cnn": {"overrides": ["experiment=digits_cnn"], "steps": (2 * 19, 8 * 19), "goal": 1.05},
    "gpt": {"overrides": ["experiment=gpt_char"], "steps": (2, 8), "goal": 1.03},
}


# One side of the comparison: run(steps) trains for that many optimizer steps in a fresh
# scratch directory, which it appends to the `dirs` list given to the factory (the caller
# removes them once timing is done).
Runner = Callable[[int], Any]


def template_runner(overrides: list[str], dirs: list[Path]) -> Runner:
    """`litforge.training.train(cfg)` as `python train.py *overrides` runs it (no test)."""

    def run(steps: int) -> Any:
        dirs.append(scratch_dir())
        cfg = compose([*overrides, f"trainer.max_steps={steps}", "test=false"], dirs[-1])
        return train(cfg)

    return run


def lightning_runner(overrides: list[str], dirs: list[Path]) -> Runner:
    """Lightning's minimal Trainer (no logger, checkpoints, callbacks) on the same module."""

    def run(steps: int) -> Any:
        dirs.append(scratch_dir())
        cfg = compose([*overrides, f"trainer.max_steps={steps}"], dirs[-1])
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        t = cfg.trainer
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            precision=t.precision,
            max_epochs=t.max_epochs,
            max_steps=steps,
            val_check_interval=t.val_check_interval,
            check_val_every_n_epoch=t.check_val_every_n_epoch,
            limit_val_batches=t.limit_val_batches,
            use_distributed_sampler=False,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=dirs[-1],
        )
        datamodule, module = build.build_datamodule(cfg), build.build_module(cfg)
        trainer.fit(module, datamodule=datamodule)
        return trainer.global_step

    return run


def raw_runner(overrides: list[str], dirs: list[Path]) -> Runner:
    """The hand-written loop of `benchmarks.rawloop` on the same config."""

    def run(steps: int) -> Any:
        dirs.append(scratch_dir())
        cfg = compose([*overrides, f"trainer.max_steps={steps}"], dirs[-1])
        return rawloop.fit(cfg, build.build_datamodule(cfg), steps, dirs[-1])

    return run


def measure(model: str, repeats: int = MIN_REPEATS) -> dict[str, Figure]:
    spec = MODELS[model]
    short, long = spec["steps"]
    dirs: list[Path] = []
    runs = {
        name: make(spec["overrides"], dirs)
        for name, make in (
            ("template", template_runner),
            ("lightning", lightning_runner),
            ("raw", raw_runner),
        )
    }
    for run in runs.values():  # warm-up: first-call costs (imports, allocator) stay out
        run(short)
    sides = {name: (lambda run=run: per_step(run, short, long)) for name, run in runs.items()}
    values = interleaved(sides, repeats)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    ms = {name: [v * 1e3 for v in vals] for name, vals in values.items()}
    per_step_ms = {name: round(statistics.median(v), 4) for name, v in ms.items()}
    return {
        f"overhead_{model}": Figure.of(
            ratios(values, "template", "raw"),
            "x raw loop",
            f"<= {spec['goal']}",
            note="template / hand-written loop, CPU time per step",
            extra={"ms_per_step_median": per_step_ms, "steps": [short, long]},
        ),
        f"overhead_{model}_lightning": Figure.of(
            ratios(values, "lightning", "raw"),
            "x raw loop",
            note="Lightning's minimal Trainer / hand-written loop",
        ),
        f"overhead_{model}_callbacks": Figure.of(
            ratios(values, "template", "lightning"),
            "x minimal Trainer",
            note="template / minimal Trainer: the cost of litforge's callbacks and logger",
        ),
    }
