"""callbacks.step_breakdown.*: the step breakdown's keyword arguments, their defaults and
rules (litforge.monitors.step_breakdown.StepBreakdown takes its defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass

from litforge.settings import Settings, key
from litforge.settings.rules import Int


@dataclass(frozen=True)
class StepBreakdownSettings(Settings):
    """Where did the step go: a torch.profiler trace of a few training steps after warm-up
    (run_dir/step_trace/, Chrome trace JSON for Perfetto or TensorBoard), then one screen
    splitting the step into data wait, host-to-device copy, forward, backward, optimizer,
    callbacks, logging, checkpoint, communication, validation and, on a GPU, device idle,
    with one line of advice; the figures also go to run.json (step_breakdown). Outside the
    window nothing is recorded. Added by debug=profile, or 'callbacks=[default,step_breakdown]'."""

    GROUP = "callbacks.step_breakdown"
    TITLE = "callbacks.step_breakdown"
    GROUP_FILE = "callbacks/step_breakdown.yaml"
    NODE = "step_breakdown"
    TARGET = "litforge.monitors.step_breakdown.StepBreakdown"

    wait_steps: int = key(
        5,
        Int(0),
        "training batches before the profiler starts (compilation, caches, the loader's fill)",
        error="{key}={value!r} {reason} (training batches run before the profiler starts)",
    )
    warmup_steps: int = key(
        1,
        Int(0),
        "batches profiled and thrown away: the profiler's own start-up",
        error="{key}={value!r} {reason} (batches profiled and discarded before the window)",
    )
    active_steps: int = key(
        5,
        Int(1, 100),
        "batches recorded in the trace and the breakdown (the trace grows with each)",
        error="{key}={value!r} {reason} (batches recorded; more makes a large trace file)",
    )
