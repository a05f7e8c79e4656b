"""Where a step's time went, read from a torch.profiler Chrome trace.

The host's timeline is the training thread's ranges: the `ProfilerStep#N` that torch.profiler
opens at each step, the ranges Lightning names its hooks with (`[Callback]...`,
`[Strategy]...training_step`, `[_TrainingEpochLoop].train_dataloader_next`, ...), torch's
own (`Optimizer.step#AdamW.step`) and the ones litforge adds around logging. At every instant
the innermost range that has a category owns the time (its exclusive time); a range with no
category (a user's own `record_function`) is transparent, and time in no range is `other`
(Lightning's loop itself).

On a GPU the step is the device's: each instant is a kernel's (whose category is that of
the host range that launched it, matched by the trace's correlation ids), exposed
communication (an NCCL kernel with no compute beside it), a host-to-device copy, or idle, and
an idle instant belongs to what the host was doing then (an idle GPU while the host waits for
data is data wait). Shares therefore add up to the step in both cases.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CATEGORIES = (
    "data_wait", "to_device", "forward", "backward", "optimizer", "callbacks", "logging",
    "checkpoint", "communication", "validation", "other",
)  # fmt: skip
# The parts a setting can shrink; forward, backward and optimizer are the work itself.
AVOIDABLE = (
    "data_wait", "to_device", "callbacks", "logging", "checkpoint", "communication",
    "validation", "other",
)  # fmt: skip

KINDS = ("compute", "communication", "copy", "idle")
_COMM = ("nccl", "gloo", "c10d::", "record_param_comms")
# Hook name (after the last dot) -> category, for the Strategy's and the LightningModule's.
_HOOKS = {
    "batch_to_device": "to_device",
    "transfer_batch_to_device": "to_device",
    "on_before_batch_transfer": "to_device",
    "on_after_batch_transfer": "to_device",
    "training_step": "forward",
    "backward": "backward",
    "optimizer_step": "optimizer",
    "optimizer_zero_grad": "optimizer",
    "configure_gradient_clipping": "optimizer",
    "lr_scheduler_step": "optimizer",
    "reduce": "communication",
    "barrier": "communication",
    "all_gather": "communication",
    "broadcast": "communication",
}


@dataclass
class Breakdown:
    """Shares of the mean step (they add up to 1), the step's mean seconds, and, on a GPU,
    the share the device sat idle. `parts`: (category, label) -> share, e.g. which callback."""

    steps: int
    step_s: float
    shares: dict[str, float]
    parts: dict[tuple[str, str], float] = field(default_factory=dict)
    device_idle: float | None = None
    # GPU: the window's shares of compute, communication and copy kernels (each instant
    # counted once, in that order of precedence) and idle, as HTA's temporal breakdown splits it
    device: dict[str, float] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The figures as run.json holds them."""
        return {
            "steps": self.steps,
            "step_s": round(self.step_s, 6),
            "shares": {c: round(self.shares.get(c, 0.0), 4) for c in CATEGORIES},
            "device_idle": None if self.device_idle is None else round(self.device_idle, 4),
            "device": {kind: round(share, 4) for kind, share in self.device.items()},
            "largest": {f"{c}:{label}": round(s, 4) for (c, label), s in self.top_parts(5)},
        }

    def top_parts(
        self, count: int, category: str | None = None
    ) -> list[tuple[tuple[str, str], float]]:
        found = [(k, s) for k, s in self.parts.items() if category in (None, k[0]) and k[1]]
        return sorted(found, key=lambda item: -item[1])[:count]


def classify(name: str, callbacks: Mapping[str, tuple[str, str]]) -> tuple[str, str] | None:
    """A range's (category, label); None for a range that is not ours to place.
    `callbacks`: a callback's `state_key` -> (category, label)."""
    if name.startswith("ProfilerStep#") or name in ("run_training_batch", "run_training_epoch"):
        return "other", ""
    if name == "save_checkpoint":
        return "checkpoint", "Trainer.save_checkpoint"
    if name.startswith("[Logger]") or name.startswith("[Lightning]logging"):
        return "logging", name.split("]", 1)[1]
    if name.startswith("[Callback]"):
        state_key, _, hook = name[len("[Callback]") :].rpartition(".")
        category, label = callbacks.get(state_key, ("callbacks", state_key.split("{")[0]))
        return ("validation", label) if "validation" in hook else (category, label)
    if name.startswith("Optimizer.") or name == "optimizer_step":
        return "optimizer", ""
    if name.endswith(("_dataloader_next", "val_next")) or name.startswith("[_EvaluationLoop]"):
        return ("data_wait", "") if name.startswith("[_TrainingEpochLoop]") else ("validation", "")
    if name.startswith(("[Strategy]", "[LightningModule]", "[LightningDataModule]")):
        owner, _, hook = name.rpartition(".")
        if "validation" in hook:
            return "validation", ""
        if hook in _HOOKS:
            return _HOOKS[hook], ""
        return "callbacks", f"{owner.split(']', 1)[1]}.{hook}"  # the module's own hooks
    if name.lower().startswith(_COMM):
        return "communication", ""
    return None


Segment = tuple[float, float, str, str]  # start, end (µs), category, label


def host_segments(
    ranges: Iterable[tuple[float, float, str, str]], t0: float, t1: float
) -> list[Segment]:
    """[t0, t1] cut into pieces, each owned by the innermost range open over it (ranges of one
    thread nest; one that outlives its parent is clipped to it)."""
    found: list[Segment] = []
    stack: list[tuple[float, str, str]] = [(t1, "other", "")]  # end, category, label
    cursor = t0

    def close_until(moment: float) -> None:
        nonlocal cursor
        while len(stack) > 1 and stack[-1][0] <= moment:
            end, category, label = stack.pop()
            if end > cursor:
                found.append((cursor, end, category, label))
                cursor = end

    for start, end, category, label in sorted(ranges, key=lambda r: (r[0], -r[1])):
        start, end = max(start, t0), min(end, t1)
        if end <= start:
            continue
        close_until(start)
        if start > cursor:
            found.append((cursor, start, *stack[-1][1:]))
            cursor = start
        stack.append((min(end, stack[-1][0]), category, label))
    close_until(t1)
    if t1 > cursor:
        found.append((cursor, t1, *stack[0][1:]))
    return found


def _owner(segments: list[Segment], starts: list[float], moment: float) -> tuple[str, str]:
    index = max(bisect.bisect_right(starts, moment) - 1, 0)
    return segments[index][2], segments[index][3]


def _device_segments(events: list[dict[str, Any]], host: list[Segment], t0: float, t1: float,
                     launchers: Mapping[Any, float]) -> tuple[list[Segment], dict[str, float]]:  # fmt: skip
    """The device's timeline over [t0, t1] in pieces, and µs of each kind of work and idle."""
    starts = [s[0] for s in host]
    work = []  # start, end, kind (0 compute, 1 communication, 2 copy), category, label
    for event in events:
        start, end = float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0))
        name = event.get("name", "")
        launched = launchers.get(event.get("args", {}).get("correlation"), start)
        if "nccl" in name.lower():
            work.append((start, end, 1, "communication", ""))
        elif event.get("cat") == "gpu_memcpy" and "HtoD" in name:
            work.append((start, end, 2, "to_device", ""))
        elif event.get("cat") in ("gpu_memcpy", "gpu_memset"):  # e.g. .item()'s copy back
            work.append((start, end, 2, *_owner(host, starts, launched)))
        else:
            work.append((start, end, 0, *_owner(host, starts, launched)))
    cuts = sorted({t0, t1, *(min(max(w[i], t0), t1) for w in work for i in (0, 1))})
    pieces: list[Segment] = []
    spent = dict.fromkeys(KINDS, 0.0)
    by_start = sorted(work)
    active: list[tuple[float, float, int, str, str]] = []  # a few at a time: one per stream
    ahead = 0
    for a, b in zip(cuts, cuts[1:], strict=False):
        while ahead < len(by_start) and by_start[ahead][0] < b:
            active.append(by_start[ahead])
            ahead += 1
        active = [w for w in active if w[1] > a]
        if active:
            best = min(active, key=lambda w: (w[2], -w[0]))  # compute first, then the newest
            pieces.append((a, b, best[3], best[4]))
            spent[KINDS[best[2]]] += b - a
            continue
        spent["idle"] += b - a
        index = max(bisect.bisect_right(starts, a) - 1, 0)
        while index < len(host) and host[index][0] < b:
            start, end, category, label = host[index]
            pieces.append((max(a, start), min(b, end), category, label))
            index += 1
    return pieces, spent


def host_steps(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The host's `ProfilerStep#N` ranges (on a GPU, Kineto copies each range onto the
    device's timeline too, as `gpu_user_annotation`: not those)."""
    return [e for e in events if e.get("cat") == "user_annotation"
            and str(e.get("name", "")).startswith("ProfilerStep#")]  # fmt: skip


def analyse(trace: Mapping[str, Any], callbacks: Mapping[str, tuple[str, str]]) -> Breakdown | None:
    """The breakdown of a Chrome trace's `ProfilerStep#N` window (None when it has none)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    steps = host_steps(events)
    if not steps:
        return None
    thread = (steps[0]["pid"], steps[0]["tid"])
    t0 = min(float(e["ts"]) for e in steps)
    t1 = max(float(e["ts"]) + float(e["dur"]) for e in steps)
    ranges = []
    for event in events:
        if (event.get("pid"), event.get("tid")) != thread:
            continue
        placed = classify(str(event.get("name", "")), callbacks)
        if placed is not None:
            ranges.append((float(event["ts"]), float(event["ts"]) + float(event["dur"]), *placed))
    segments = host_segments(ranges, t0, t1)
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    idle, kinds = None, {}
    if device:
        launchers = {e["args"]["correlation"]: float(e["ts"]) for e in events
                     if e.get("cat") in ("cuda_runtime", "cuda_driver")
                     and "correlation" in e.get("args", {})}  # fmt: skip
        segments, spent = _device_segments(device, segments, t0, t1, launchers)
        kinds = {kind: us / (t1 - t0) for kind, us in spent.items()}
        idle = kinds["idle"]
    shares: dict[str, float] = defaultdict(float)
    parts: dict[tuple[str, str], float] = defaultdict(float)
    for start, end, category, label in segments:
        shares[category] += (end - start) / (t1 - t0)
        parts[category, label] += (end - start) / (t1 - t0)
    step_s = (t1 - t0) / len(steps) / 1e6
    return Breakdown(len(steps), step_s, dict(shares), dict(parts), idle, kinds)


def analyse_file(path: str | Path, callbacks: Mapping[str, tuple[str, str]]) -> Breakdown | None:
    return analyse(json.loads(Path(path).read_text()), callbacks)
