"""Counted per-step cost: litforge's callbacks and logger over Lightning's minimal Trainer.

`make bench-exact` (`python -m benchmarks.exact`): benchmarks/results/exact.json and a
table. The same two sides as the timed `overhead_*_callbacks` figures
(`benchmarks.overhead`: the template's `train(cfg)` with its default callbacks and CSV
logger, and Lightning's minimal Trainer on the same module and data), but counted, not
timed, so a loaded machine does not move the figure:

  instructions  executed by the training process in a window of steps, counted by
                valgrind's callgrind (`benchmarks.exact_valgrind`); the window starts
                after warm-up, so imports, start-up and first calls are left out, and
                spans whole logging periods (and, for the CNN, whole epochs with their
                validation and checkpoint save), so the per-step figure holds them in
                proportion. The figure is template / minimal Trainer instructions per step.
  calls         Python and C function calls in the same window (`sys.setprofile`),
                charged to the callback or logger whose hook makes them: which part costs
                what. Calls are not instructions (one tensor op is one call), so the
                parts are reported, not added up to the figure.

Each side runs in a process of its own (`benchmarks.exact_child`), torch on one thread
with its SSE4.2 kernels (see KERNELS), PYTHONHASHSEED fixed. What is left that depends on the clock is listed in
docs/performance.md ("Counted per-step cost"). Slow (valgrind): minutes, never in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.exact_calls import REST
from benchmarks.exact_valgrind import build, count, missing
from benchmarks.harness import RESULTS, setup
from benchmarks.stats import Figure

# Windows (start, end) in optimizer steps: after warm-up, a multiple of log_every_n_steps
# (10), and for digits (19 batches per epoch) whole epochs: two epoch ends (38, 57) fall
# between 38 and 76, with their validation and checkpoint save; 190 would hold the log
# rows exactly in proportion too, at five times the valgrind time.
WINDOWS = {"cnn": (38, 76), "gpt": (10, 30)}
GOAL = "<= 1.02"
SIDES = ("template", "lightning")
# valgrind runs AVX2 and FMA instructions through slow helper calls: torch's kernels at
# those levels take ~100x longer under it than SSE4.2 ones, so the counted processes use
# the SSE4.2 kernels (MKL, oneDNN and ATen's own), the same on both sides.
KERNELS = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41",
           "ATEN_CPU_CAPABILITY": "default"}  # fmt: skip
ENV = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "CI": "1", **KERNELS}
OUT = RESULTS / "exact.json"


# Parts of the template switched off one at a time (`--parts`): what each adds per step.
PARTS = {
    "checkpointing (saves, resume and preemption callbacks)": "checkpoint=none",
    "NumericsWatch": "callbacks.numerics=null",
    "ThroughputMFU": "callbacks.throughput=null",
    "LearningRateMonitor": "callbacks.lr_monitor=null",
    "LogFastPath": "callbacks.log_fast_path=null",
}


def _child(model: str, side: str, mode: str, out: str = "-", *extra: str) -> list[str]:
    start, end = WINDOWS[model]
    return ["-m", "benchmarks.exact_child", model, side, str(start), str(end), mode, out, *extra]


def instructions(model: str, side: str, library: Path, *extra: str) -> float:
    """Instructions per step of `side` in `model`'s window (extra: template overrides)."""
    start, end = WINDOWS[model]
    argv = _child(model, side, "instructions", "-", *extra)
    return count(argv, library, ENV)["window"] / (end - start)


def calls(model: str, side: str) -> dict[str, float]:
    """label -> calls per step of `side` in `model`'s window (no valgrind)."""
    import subprocess

    start, end = WINDOWS[model]
    with tempfile.TemporaryDirectory(prefix="litforge-calls-") as tmp:
        out = Path(tmp) / "calls.json"
        done = subprocess.run(
            [sys.executable, *_child(model, side, "calls", str(out))],
            env={**os.environ, **ENV}, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{model} {side} (calls) failed:\n{done.stderr[-3000:]}")
        found = json.loads(out.read_text())
    return {label: n / (end - start) for label, n in found.items()}


def measure(models: list[str], jobs: int, parts: bool) -> dict[str, Figure]:
    with tempfile.TemporaryDirectory(prefix="litforge-exact-") as tmp:
        library = build(Path(tmp))
        runs = [(m, s, "") for m in models for s in SIDES]
        runs += [(m, "template", o) for m in models for o in PARTS.values()] if parts else []

        def one(run: tuple[str, str, str]) -> float:
            model, side, override = run
            return instructions(model, side, library, *([override] if override else []))

        # Counts do not depend on what else runs: the processes may share the cores.
        with ThreadPoolExecutor(jobs) as pool:
            counted = dict(zip(runs, pool.map(one, runs), strict=True))
    figures = {}
    for model in models:
        ins = {side: counted[model, side, ""] for side in SIDES}
        # What each part adds per step, as a share of the minimal Trainer's step.
        without = {name: (ins["template"] - counted[model, "template", o]) / ins["lightning"]
                   for name, o in PARTS.items() if (model, "template", o) in counted}  # fmt: skip
        per_call = {side: calls(model, side) for side in SIDES}
        total = {side: sum(per_call[side].values()) for side in SIDES}
        parts = {label: round(n, 1) for label, n in sorted(per_call["template"].items(),
                 key=lambda item: -item[1])}  # fmt: skip
        # Lightning's own extra work for the template's callbacks and logger (calling
        # their hooks, the logger connector) is the difference of the uncharged calls.
        parts["Lightning's extra work for them"] = round(
            per_call["template"][REST] - per_call["lightning"][REST], 1
        )
        start, end = WINDOWS[model]
        figures[f"exact_{model}_callbacks"] = Figure.of(
            [ins["template"] / ins["lightning"]],
            "x minimal Trainer",
            GOAL,
            note=f"{model}: instructions per step, template / minimal Trainer (callgrind)",
            extra={
                "window_steps": [start, end],
                "instructions_per_step": {s: round(v) for s, v in ins.items()},
                "calls_per_step": {s: round(v, 1) for s, v in total.items()},
                "calls_ratio": round(total["template"] / total["lightning"], 4),
                "template_calls_per_step_by_part": parts,
                "instructions_share_by_part": {k: round(v, 5) for k, v in without.items()},
            },
        )
    return figures


def table(figures: dict[str, Figure], previous: dict[str, Any]) -> str:
    lines = [
        "| figure | value | goal | met | instructions/step template | minimal Trainer "
        "| calls ratio | change from previous run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, fig in figures.items():
        ins = fig.extra["instructions_per_step"]
        before = previous.get(name, {}).get("median")
        change = f"{100 * (fig.median / before - 1):+.3f}%" if before else "(first run)"
        met = {True: "yes", False: "**no**", None: ""}[fig.met]
        lines.append(
            f"| `{name}` | {fig.median:.4f} | {fig.goal} | {met} | {ins['template']:,} "
            f"| {ins['lightning']:,} | {fig.extra['calls_ratio']:.4f} | {change} |"
        )
    for name, fig in figures.items():
        if fig.extra["instructions_share_by_part"]:
            lines += ["", f"{name}: instructions each part adds per step (template without it)"]
            lines += [f"  {share:>+9.2%}  {part}" for part, share in
                      fig.extra["instructions_share_by_part"].items()]  # fmt: skip
        lines += ["", f"{name}: template calls per step, by part"]
        lines += [f"  {n:>9.1f}  {label}" for label, n in
                  fig.extra["template_calls_per_step_by_part"].items()]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,gpt", help="comma-separated: cnn, gpt")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind processes at once")
    parser.add_argument(
        "--parts", action="store_true", help="also count the template without each of PARTS"
    )
    parser.add_argument("--out", type=Path, default=OUT, help=f"JSON to write (default {OUT})")
    args = parser.parse_args(argv)
    why = missing()
    if why:
        sys.exit(f"bench-exact: {why}")
    from benchmarks.run import machine

    setup()  # one torch thread here too, as in the counted processes (machine() reports it)

    out: Path = args.out
    previous = json.loads(out.read_text()) if out.exists() else {}
    started = time.perf_counter()
    figures = measure([m for m in args.models.split(",") if m], args.jobs, args.parts)
    info = {**machine(), "wall_s": round(time.perf_counter() - started),
            "load_average": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip
    payload = {"machine": info, **{k: f.to_json() for k, f in figures.items()}}
    if previous:
        payload["previous"] = {k: v for k, v in previous.items() if k != "previous"}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(table(figures, previous))
    print(f"\n{info['wall_s']} s, load average {info['load_average']}; wrote {out}")


if __name__ == "__main__":
    main()
