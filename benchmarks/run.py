"""`make bench`: run the CPU benchmarks, write results/latest.json and results/latest.md.

python -m benchmarks.run                     # everything (< 10 min on 2 cores)
python -m benchmarks.run --only overhead     # one group: overhead memory quality startup
                                             # checkpoint sweep pool streaming loggers hooks
                                             # profiler restart fp8
python -m benchmarks.run --only compile      # opt-in groups, not in the default suite:
                                             # compile, distributed, numerics
python -m benchmarks.run --update-readme     # also paste the table into docs/performance.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import RESULTS, ROOT, setup
from benchmarks.stats import MIN_REPEATS, Figure, show

README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"


def groups(repeats: int) -> dict[str, Callable[[], dict[str, Figure]]]:
    from benchmarks import (
        checkpoint_stall,
        compile_step,
        distributed,
        fp8_safety,
        hook_costs,
        logger_overhead,
        memory,
        numerics_overhead,
        overhead,
        pool_parallel,
        profiler_overhead,
        quality,
        startup,
        streaming,
        sweep_overhead,
        warm_restart,
    )

    return {
        # Within the suite's 10 minutes: 5 repeats where 7 cost a minute and the spread is
        # small (memory's step-time ratios, startup's CPU seconds of fresh processes), or
        # where an A/B ratio's spread is far wider than 2 more pairs narrow (the loggers':
        # `hooks` accounts the same costs inside the run, steadily). `overhead` takes
        # turns of a few steps inside one process (benchmarks/relay.py): its rounds are
        # fixed per model.
        "overhead": lambda: {**overhead.measure("cnn"), **overhead.measure("gpt")},
        "memory": lambda: {
            **memory.measure_checkpointing(min(repeats, 5)),
            **memory.measure_precision(min(repeats, 5)),
        },
        "quality": quality.measure,
        "startup": lambda: startup.measure(min(repeats, 5)),
        "checkpoint": lambda: checkpoint_stall.measure(repeats),
        "sweep": sweep_overhead.measure,
        "pool": pool_parallel.measure,
        "streaming": lambda: streaming.measure(repeats),
        "loggers": lambda: logger_overhead.measure(min(repeats, 5)),
        "hooks": lambda: hook_costs.measure(3),
        # The step breakdown's cost outside its window (callbacks.step_breakdown): 3 A/B
        # pairs (their spread hides a 3% effect either way) and 3 runs accounted inside.
        "profiler": lambda: profiler_overhead.measure(min(repeats, 3)),
        # Three train.py processes that compile (about 2 minutes): one trio, as the figure
        # is a ratio of several in wall time (compiling runs in worker processes).
        "restart": lambda: warm_restart.measure(1),
        # fp8 against bf16: gpt_char's validation loss after the same steps (safety, not
        # speed: a CPU has no FP8 units); four runs of 100 steps, about 3 minutes.
        "fp8": fp8_safety.measure,
        # Opt-in (--only): what each default callback costs is in `hooks` now, steadier than
        # numerics' A/B ratio; distributed starts ~20 processes (90 s); compile compiles.
        "distributed": lambda: distributed.measure(min(repeats, 3)),
        "numerics": lambda: numerics_overhead.measure(repeats),
        "compile": lambda: compile_step.measure(min(repeats, 5)),
    }


OPT_IN = ("distributed", "numerics", "compile")


def machine() -> dict[str, Any]:
    import lightning
    import torch

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import os

    return {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "threads": torch.get_num_threads(),
    }


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def markdown(figures: dict[str, Figure], info: dict[str, Any]) -> str:
    lines = [
        f"CPU benchmarks, {info['date']}: {info['cpu']}, {info['cores']} cores (torch on "
        f"{info['threads']} thread), torch {info['torch']}, lightning {info['lightning']}; "
        f"{info['wall_s']:.0f} s in all. Ratios are medians of {MIN_REPEATS} interleaved "
        "pairs of CPU time (5 for overhead, memory, startup and loggers), `hook_share_*` of 3 runs each "
        "accounted inside the run; byte and FLOP counts are exact. The `ckpt_block_ms_*` figures "
        "(and their async/sync ratios) are wall-clock ms per checkpoint save, medians of "
        f"{MIN_REPEATS}+ interleaved runs.",
        "",
        "| figure | median | min | max | unit | goal | met | what |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, fig in figures.items():
        met = {True: "yes", False: "**no**", None: ""}[fig.met]
        lines.append(
            f"| `{name}` | {_fmt(fig.median)} | {_fmt(fig.min)} | {_fmt(fig.max)} | {fig.unit} "
            f"| {fig.goal or 'reported'} | {met} | {fig.note} |"
        )
    return "\n".join(lines) + "\n"


def update_readme(table: str) -> None:
    readme = ROOT / "docs" / "performance.md"
    text = readme.read_text()
    if README_START not in text:
        sys.exit(f"docs/performance.md has no {README_START} ... {README_END} block")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_START}\n{table}{README_END}{tail}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated groups to run")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--update-readme", action="store_true")
    args = parser.parse_args(argv)
    setup()
    start = time.perf_counter()
    todo = groups(args.repeats)
    only = [g for g in args.only.split(",") if g]
    figures: dict[str, Figure] = {}
    failed: list[str] = []
    for name, measure in todo.items():
        if (only and name not in only) or (not only and name in OPT_IN):
            continue
        print(f"{name}:", flush=True)
        t0 = time.perf_counter()
        # The template prints model summaries and Lightning tips; keep the report readable.
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                result = measure()
        except Exception as err:  # one broken group must not cost the other figures
            print(f"  FAILED: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        for key, fig in result.items():
            show(key, fig)
        print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
        figures.update(result)
    info = {**machine(), "wall_s": time.perf_counter() - start}
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "latest" if not only else "partial"
    payload = {
        "machine": info,
        **{k: f.to_json() for k, f in figures.items()},
        **({"failed_groups": failed} if failed else {}),
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    table = markdown(figures, info)
    (RESULTS / f"{name}.md").write_text(table)
    print(f"\n{table}\nwrote {RESULTS / name}.json and .md", flush=True)
    if args.update_readme and not only and not failed:
        update_readme(table)
    if failed:
        sys.exit(f"failed groups: {', '.join(failed)}")


if __name__ == "__main__":
    main()
