"""The step breakdown of one GPU run beside HTA's temporal breakdown of the same trace
(benchmarks/gpu.sh; never CI).

HolisticTraceAnalysis (HTA) splits a rank's GPU time into idle, compute and non-compute
(communication and memory kernels not hidden under compute) over the span from its first
kernel to its last, and by default leaves the last profiler step out. litforge's breakdown
(litforge.monitors.step_breakdown_trace) splits the same instants the same way, over the
profiled steps from the host's first step start to its last step end, and then attributes
each instant to a part of the step. Both are given here over HTA's own span as well, so a
gap between the two is a difference of attribution, not of window.

HTA pulls pandas, plotly and jupyter: it runs from its own interpreter (`--hta-python`, a
venv gpu.sh makes with `pip install HolisticTraceAnalysis==0.5.0`), never litforge's.

  python -m benchmarks.hta_compare --run             # train debug=profile on the GPU, compare
  python -m benchmarks.hta_compare --trace RUN/step_trace/rank0.pt.trace.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from litforge.monitors.step_breakdown_trace import analyse, host_steps

# Runs in HTA's interpreter: its temporal breakdown of the traces in argv[1], as JSON.
HTA_SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
table = analysis.get_temporal_breakdown(visualize=False)
print(json.dumps(table.to_dict(orient="records")))
"""
# The run --run profiles: gpt_char's data and model at a GPU-sized width.
RUN = [
    "experiment=gpt_char", "debug=profile", "trainer=gpu", "precision=bf16-mixed", "test=false",
    "model.net.n_layer=6", "model.net.n_embd=384", "data.block_size=256", "data.batch_size=32",
]  # fmt: skip


def kernel_span(trace: dict[str, Any]) -> tuple[float, float] | None:
    """HTA's window: the first kernel's start to the last kernel's end (µs)."""
    kernels = [e for e in trace.get("traceEvents", [])
               if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]  # fmt: skip
    if not kernels:
        return None
    return min(float(e["ts"]) for e in kernels), max(
        float(e["ts"]) + float(e["dur"]) for e in kernels
    )


def ours(trace: dict[str, Any]) -> dict[str, Any]:
    """litforge's device split over its own window (the profiled steps) and over HTA's span."""
    found = analyse(trace, {})
    if found is None or not found.device:
        raise SystemExit("the trace has no profiled steps with GPU kernels")
    span = kernel_span(trace)
    steps = host_steps(trace["traceEvents"])
    # The same instants over HTA's span: clip the steps to it and split again.
    clipped = {**trace, "traceEvents": [e for e in trace["traceEvents"] if e not in steps] + [
        {**e, "ts": max(float(e["ts"]), span[0]),
         "dur": min(float(e["ts"]) + float(e["dur"]), span[1]) - max(float(e["ts"]), span[0])}
        for e in steps if span is not None
    ]}  # fmt: skip
    over_span = analyse(clipped, {})
    return {
        "steps": found.device,
        "kernel_span": over_span.device if over_span is not None else {},
        "shares": found.shares,
        "step_ms": 1000 * found.step_s,
    }


def hta(trace: Path, python: str) -> dict[str, float]:
    """HTA's idle, compute and non-compute shares of rank 0 (fractions of its span)."""
    with tempfile.TemporaryDirectory() as alone:  # HTA reads every trace in a directory
        (Path(alone) / trace.name).symlink_to(trace.resolve())
        done = subprocess.run([python, "-c", HTA_SCRIPT, alone], capture_output=True,
                              text=True, timeout=600)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"HTA failed: {done.stderr.strip().splitlines()[-1:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])[0]
    return {kind: row[f"{kind}_time_pctg"] / 100 for kind in ("idle", "compute", "non_compute")}


def table(our: dict[str, Any], their: dict[str, float] | None) -> str:
    """Markdown rows: idle, compute, non-compute from each side."""
    lines = ["| share of GPU time | litforge (profiled steps) | litforge (HTA's span) | HTA |",
             "|---|---|---|---|"]  # fmt: skip
    for kind in ("idle", "compute", "non_compute"):
        mine = [our[window].get(kind, 0.0) if kind != "non_compute" else
                our[window].get("communication", 0.0) + our[window].get("copy", 0.0)
                for window in ("steps", "kernel_span")]  # fmt: skip
        theirs = "not run" if their is None else f"{100 * their[kind]:.1f}%"
        lines.append(f"| {kind} | {100 * mine[0]:.1f}% | {100 * mine[1]:.1f}% | {theirs} |")
    return "\n".join(lines)


def _train(run_dir: Path) -> Path:
    from litforge.cli import compose
    from litforge.training import train

    train(compose(RUN, run_dir))
    return Path(json.loads((run_dir / "run.json").read_text())["step_breakdown"]["trace"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", type=Path, help="a step breakdown's trace file")
    source.add_argument("--run", action="store_true", help="profile a GPT on the GPU first")
    parser.add_argument("--hta-python", help="an interpreter with HTA installed (else: ours only)")
    parser.add_argument("--json", type=Path, help="write both sides here")
    args = parser.parse_args(argv)
    trace = args.trace or _train(Path(tempfile.mkdtemp(prefix="litforge-hta-")))
    our = ours(json.loads(trace.read_text()))
    their = hta(trace, args.hta_python) if args.hta_python else None
    print(f"trace {trace}: {our['step_ms']:.1f} ms a step")
    print(table(our, their))
    if args.json:
        args.json.write_text(json.dumps({"trace": str(trace), "litforge": our, "hta": their},
                                        indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
