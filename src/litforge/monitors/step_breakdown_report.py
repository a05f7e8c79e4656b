"""The step breakdown's one screen: a row per part of the step, and one line of advice for
the largest part a setting can shrink."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from litforge.monitors.step_breakdown_trace import AVOIDABLE, CATEGORIES, Breakdown

TITLES = {
    "data_wait": "data wait",
    "to_device": "host-to-device copy",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "callbacks": "callbacks and hooks",
    "logging": "logging",
    "checkpoint": "checkpoint save",
    "communication": "communication",
    "validation": "validation",
    "other": "other (Lightning's loop)",
}
# Below this share of the step nothing is worth a setting.
WORTH = 0.05


def screen(found: Breakdown, trace: Path, facts: Mapping[str, Any]) -> str:
    """The breakdown as printed. `facts`: what the advice quotes (the loader's settings,
    trainer.log_every_n_steps, the config key of each callback class)."""
    lines = [
        f"step breakdown: {found.steps} training steps of {1000 * found.step_s:.1f} ms "
        f"(mean); trace {trace} (ui.perfetto.dev, or TensorBoard's profiler plugin)"
    ]
    for category in CATEGORIES:
        share = found.shares.get(category, 0.0)
        shown = [(label, s) for (_, label), s in found.top_parts(2, category) if s >= 0.0005]
        detail = ", ".join(f"{label} {100 * s:.1f}%" for label, s in shown)
        bar = "#" * round(40 * share)
        lines.append(f"  {TITLES[category]:<26}{100 * share:5.1f}%  {bar}"
                     + (f"  ({detail})" if detail and category != "other" else ""))  # fmt: skip
    if found.device_idle is not None:
        lines.append(f"  the GPU sat idle {100 * found.device_idle:.1f}% of the step (counted "
                     "above under what the host was doing then)")  # fmt: skip
    lines.append(f"advice: {advice(found, facts)}")
    return "\n".join(lines)


def advice(found: Breakdown, facts: Mapping[str, Any]) -> str:
    """One line for the largest avoidable part of the step, or what speeds up the work."""
    share, category = max((found.shares.get(c, 0.0), c) for c in AVOIDABLE)
    pct = f"{100 * share:.0f}%"
    if share < WORTH:
        work = sum(found.shares.get(c, 0.0) for c in ("forward", "backward", "optimizer"))
        return (f"the step is {100 * work:.0f}% forward, backward and optimizer, nothing "
                "avoidable is above 5%: compile.enabled=true, a lower precision "
                "(precision=bf16-mixed) or a larger micro-batch (data.batch_size) speed it up")  # fmt: skip
    if category == "data_wait":
        return (f"data wait is {pct} of the step: raise data.num_workers (the DataLoader has "
                f"{facts.get('loader', 'num_workers=?')}), set pin_memory=True and "
                "persistent_workers=True on it, or prepare the data once before training")  # fmt: skip
    if category == "to_device":
        return (f"the host-to-device copy is {pct} of the step: pin_memory=True on the "
                "DataLoader, and move smaller batches (integer token ids, cast on the device)")  # fmt: skip
    if category in ("callbacks", "checkpoint"):
        parts = found.top_parts(1, category)
        label = parts[0][0][1] if parts else "?"
        name = facts.get("callback_keys", {}).get(label)
        where = (f"drop it with callbacks.{name}=null" if name else
                 "it is no entry of callbacks.*: it came with another group or your code")  # fmt: skip
        if category == "checkpoint":
            return (f"checkpoint saves are {pct} of the step ({label}): save less often "
                    f"(checkpoint.every_n_train_steps, or ModelCheckpoint's every_n_train_steps) "
                    "or checkpoint.async_upload=true for a remote store")  # fmt: skip
        return (f"callbacks and hooks are {pct} of the step, most of it {label}: make its "
                f"hooks cheaper or run them less often ({where})")  # fmt: skip
    if category == "logging":
        return (f"logging is {pct} of the step: log less often (trainer.log_every_n_steps, now "
                f"{facts.get('log_every_n_steps', '?')}) and keep .item() and sync_dist=True "
                "out of training_step's self.log")  # fmt: skip
    if category == "communication":
        return (f"exposed communication is {pct} of the step: a larger micro-batch "
                "(data.batch_size) or trainer.accumulate_grad_batches sends gradients less "
                "often per sample")  # fmt: skip
    if category == "validation":
        return (f"validation is {pct} of the profiled steps: validate less often "
                "(trainer.val_check_interval) or on fewer batches (trainer.limit_val_batches)")  # fmt: skip
    return (f"Lightning's own loop is {pct} of the step: the step is too short to hide it; a "
            "larger micro-batch (data.batch_size) or compile.enabled=true makes the work the "
            "larger part")  # fmt: skip
