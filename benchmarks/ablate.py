"""Where the template's per-step overhead goes: the digits CNN with parts switched off.

Not part of `make bench` (about 2 minutes): `python -m benchmarks.ablate [--repeats N]`.
Each variant is the default template with one override, timed like figure 1 (CPU time
per step, slope of two step counts, interleaved), and reported against the raw loop.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import overhead
from benchmarks.harness import setup
from benchmarks.stats import Figure, interleaved, per_step, ratios, show

VARIANTS: dict[str, list[str]] = {
    "template": [],
    "logger=none": ["logger=none"],
    "checkpoint=none": ["checkpoint=none"],
    "callbacks=none": ["callbacks=none"],
    "all three none": ["logger=none", "callbacks=none", "checkpoint=none"],
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    setup()
    short, long = overhead.MODELS["cnn"]["steps"]
    base = overhead.MODELS["cnn"]["overrides"]
    dirs: list[Path] = []
    runs: dict[str, Any] = {
        name: overhead.template_runner([*base, *extra], dirs) for name, extra in VARIANTS.items()
    }
    runs["lightning"] = overhead.lightning_runner(base, dirs)
    runs["raw"] = overhead.raw_runner(base, dirs)
    with contextlib.redirect_stdout(io.StringIO()):
        for name, run in list(runs.items()):
            try:
                run(short)
            except Exception as err:  # a variant the current config cannot build
                print(
                    f"skipped {name}: {type(err).__name__}: {err}".splitlines()[0], file=sys.stderr
                )
                del runs[name]
        sides = {name: (lambda run=run: per_step(run, short, long)) for name, run in runs.items()}
        values = interleaved(sides, args.repeats)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    for name in runs:
        ms = statistics.median(values[name]) * 1e3
        show(f"{name} ({ms:.2f} ms/step)", Figure.of(ratios(values, name, "raw"), "x raw loop"))


if __name__ == "__main__":
    main()
