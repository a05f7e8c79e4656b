"""Figure 1, framework overhead: the template's training vs a hand-written loop.

Three sides per model, trained side by side in one process, taking turns of a few steps
(`benchmarks.relay`), each turn the process's CPU time:
  template  `litforge.training.train(cfg)` as `python train.py` runs it under CI: default
            callbacks (checkpointing, LR monitor, epoch log lines) and the CSV logger
  lightning Lightning's minimal Trainer on the same LightningModule and DataModule: no
            logger, no checkpointing, no callbacks, no model summary, no progress bar
  raw       `benchmarks.rawloop.fit`: the same work in plain PyTorch
Validation runs on the experiment's schedule on every side; the raw loop also writes the
CSV log and best/last checkpoints, so `lightning` does less file work than the other two.
A figure is the median over rounds of the per-round ratio (a turn over the geometric mean
of the other side's turns before and after it); `halves` gives the medians of the even
and odd rounds, to show how far the figure moves on half the data, and `turn_ms` every
turn, for anyone who wants another statistic.
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
from benchmarks.relay import Relay, TurnCallback, halves, paired_ratios
from benchmarks.stats import Figure
from litforge import build
from litforge.cli import compose
from litforge.training import train

# Steps per turn and rounds. Digits has 19 batches per epoch and validates and checkpoints
# each epoch, so a turn of 19 steps holds one epoch's end on every side. gpt_char
# validates every 200 steps: at the last step, after the measured rounds.
MODELS: dict[str, dict[str, Any]] = {
    "cnn": {"overrides": ["experiment=digits_cnn"], "turn": 19, "rounds": 40, "goal": 1.05},
    "gpt": {"overrides": ["experiment=gpt_char"], "turn": 8, "rounds": 24, "goal": 1.03},
}
SIDES = ("template", "lightning", "raw")  # the template trains on the main thread


def template_runner(overrides: list[str], dirs: list[Path]) -> Callable[[int], Any]:
    """run(steps): `train(cfg)` as `python train.py *overrides` runs it (no test), in a
    fresh scratch directory appended to `dirs` (the caller removes them). The whole-run
    benchmarks (hooks, loggers, numerics) time it."""

    def run(steps: int) -> Any:
        dirs.append(scratch_dir())
        return train(_config(overrides, steps, dirs[-1], "test=false"))

    return run


def _config(overrides: list[str], steps: int, run_dir: Path, *extra: str) -> Any:
    # max_epochs out of the way: the step count alone ends every side.
    return compose(
        [*overrides, f"trainer.max_steps={steps}", "trainer.max_epochs=100000", *extra], run_dir
    )


def template_side(overrides: list[str], run_dir: Path):
    """`litforge.training.train(cfg)` as `python train.py *overrides` runs it (no test)."""

    def run(relay: Relay) -> Any:
        relay_callback = f"+callbacks.relay._target_={TurnCallback.__module__}.TurnCallback"
        cfg = _config(
            overrides, relay.total_steps, run_dir, "test=false", relay_callback,
            "+callbacks.relay.side=template",
        )  # fmt: skip
        return train(cfg)

    return run


def lightning_side(overrides: list[str], run_dir: Path):
    """Lightning's minimal Trainer (no logger, checkpoints, callbacks) on the same module."""

    def run(relay: Relay) -> Any:
        cfg = _config(overrides, relay.total_steps, run_dir)
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        t = cfg.trainer
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            precision=t.precision,
            max_epochs=t.max_epochs,
            max_steps=relay.total_steps,
            val_check_interval=t.val_check_interval,
            check_val_every_n_epoch=t.check_val_every_n_epoch,
            limit_val_batches=t.limit_val_batches,
            use_distributed_sampler=False,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=run_dir,
            callbacks=[TurnCallback("lightning")],
        )
        datamodule, module = build.build_datamodule(cfg), build.build_module(cfg)
        trainer.fit(module, datamodule=datamodule)
        return trainer.global_step

    return run


def raw_side(overrides: list[str], run_dir: Path):
    """The hand-written loop of `benchmarks.rawloop` on the same config."""

    def run(relay: Relay) -> Any:
        cfg = _config(overrides, relay.total_steps, run_dir)
        datamodule = build.build_datamodule(cfg)
        on_step = lambda _step: relay.step("raw")  # noqa: E731
        return rawloop.fit(cfg, datamodule, relay.total_steps, run_dir, on_step=on_step)

    return run


def measure(model: str) -> dict[str, Figure]:
    spec = MODELS[model]
    dirs = {name: scratch_dir() for name in SIDES}
    makers = {"template": template_side, "lightning": lightning_side, "raw": raw_side}
    relay = Relay(list(SIDES), spec["turn"], spec["rounds"])
    try:
        turns = relay.run(
            "template", {name: makers[name](spec["overrides"], dirs[name]) for name in SIDES}
        )
    finally:
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)
    ms_per_step = {
        name: round(statistics.median(t) * 1e3 / spec["turn"], 4) for name, t in turns.items()
    }

    turn_ms = {name: [round(t * 1e3, 2) for t in ts] for name, ts in turns.items()}

    def figure(num: str, den: str, unit: str, **kw: Any) -> Figure:
        values = paired_ratios(turns, num, den, list(SIDES))
        extra = {"halves": halves(values), **kw.pop("extra", {})}
        return Figure.of(values, unit, extra=extra, **kw)

    steps = {"steps_per_turn": spec["turn"], "rounds": spec["rounds"]}
    return {
        f"overhead_{model}": figure(
            "template",
            "raw",
            "x raw loop",
            goal=f"<= {spec['goal']}",
            note="template / hand-written loop, CPU time per turn of steps",
            extra={"ms_per_step_median": ms_per_step, **steps, "turn_ms": turn_ms},
        ),
        f"overhead_{model}_lightning": figure(
            "lightning", "raw", "x raw loop", note="Lightning's minimal Trainer / hand-written loop"
        ),
        f"overhead_{model}_callbacks": figure(
            "template",
            "lightning",
            "x minimal Trainer",
            note="template / minimal Trainer: the cost of litforge's callbacks and logger",
        ),
    }
