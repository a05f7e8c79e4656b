"""One side of `benchmarks.exact`, trained in a process of its own, counting one window.

`python -m benchmarks.exact_child MODEL SIDE START END MODE OUT [OVERRIDE...]` trains SIDE
(`template` or `lightning`, as `benchmarks.overhead` builds them) of MODEL for END + 1
optimizer steps and counts what happens from the end of step START to the end of step
END (the overrides, e.g. `callbacks.numerics=null`, go to the model's experiment), in
one of two modes:

  instructions  under `valgrind --tool=callgrind --instr-atstart=no`: instrumentation
                starts at the window's first mark and the counters are dumped at its last
                (callgrind's client requests, through `benchmarks.exact_valgrind`), so
                start-up runs uninstrumented and the count holds exactly the window;
  calls         `sys.setprofile` counts the Python and C function calls made in the
                window, each charged to the callback or logger whose hook is running
                (the innermost one, as `benchmarks.hook_costs` charges time), the rest to
                "Lightning, model and data"; written to OUT as JSON.

The marks are taken where the timed figure hands its turns on: in this process
`TurnCallback.on_train_batch_end`, which both sides carry and which does nothing when no
relay runs, is replaced by the marking function, so both sides pay the same for it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L

from benchmarks import harness, overhead, relay
from benchmarks.exact_calls import CallCount
from benchmarks.hook_costs import HOOKS, LOGGER_CALLS

SIDES = {"template": overhead.template_side, "lightning": overhead.lightning_side}


class LabelledCount(CallCount):
    """CallCount that labels a trainer's callbacks and loggers."""

    def label_trainer(self, trainer: L.Trainer) -> None:
        """Label every overridden hook of the trainer's callbacks, and the loggers' calls."""
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            if isinstance(callback, relay.TurnCallback):
                continue
            for name in HOOKS:
                if getattr(type(callback), name, None) is not getattr(L.Callback, name):
                    label = type(callback).__name__
                    setattr(callback, name, self.label(getattr(callback, name), label))
        for logger in trainer.loggers:
            for name in LOGGER_CALLS:
                if hasattr(logger, name):
                    label = f"logger {type(logger).__name__}"
                    setattr(logger, name, self.label(getattr(logger, name), label))


def run(
    model: str, side: str, start: int, end: int, mode: str, out: Path, extra: list[str]
) -> None:
    harness.setup()
    marks: dict[str, Any] = {}
    if mode == "instructions":
        from benchmarks.exact_valgrind import client

        cg = client()
        marks = {"open": lambda _t: (cg.lf_start(), cg.lf_zero()),
                 "close": lambda _t: (cg.lf_dump(b"window"), cg.lf_stop())}  # fmt: skip
    else:
        counter = LabelledCount()

        def open_(trainer: L.Trainer) -> None:
            counter.label_trainer(trainer)
            counter.start()

        marks = {"open": open_, "close": lambda _t: counter.stop()}

    def mark(self: relay.TurnCallback, trainer: L.Trainer, *args: Any) -> None:
        # Only the step count decides: nothing here reads a clock.
        if trainer.global_step == start:
            marks["open"](trainer)
        elif trainer.global_step == end:
            marks["close"](trainer)

    relay.TurnCallback.on_train_batch_end = mark  # type: ignore[method-assign]
    run_dir = harness.scratch_dir()
    try:
        train = SIDES[side]([*overhead.MODELS[model]["overrides"], *extra], run_dir)
        train(SimpleNamespace(total_steps=end + 1))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if mode == "calls":
        out.write_text(json.dumps(counter.calls))


if __name__ == "__main__":
    model, side, first, last, mode, out, *extra = sys.argv[1:]
    run(model, side, int(first), int(last), mode, Path(out), extra)
