"""The precision A/B report as a page (precision_ab.md) and a figure (precision_ab.png).

Both read the plain report that `litforge.precision_checks.training_ab.experiment.build_report` makes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litforge.precision_checks.training_ab.compare import percent


def markdown(report: dict[str, Any]) -> str:
    """A title line, how the gap is measured, one table row per precision, the figure."""
    window, threshold = report["smooth_steps"], report["threshold"]
    what = f"{report.get('model', 'the model')} on {report.get('data', 'its data')}"
    seed = f", seed {report['seed']}" if "seed" in report else ""
    gpu = any(row["peak_memory_bytes"] is not None for row in report["precisions"])
    header = ["precision", "ran as", f"loss (last {window})", "final gap", "largest gap (step)",
              "steps/s", "activations", *(["peak memory"] if gpu else []), "verdict"]  # fmt: skip
    lines = [
        "# Precision A/B",
        "",
        f"{what}, {report['steps']} steps per precision{seed}, on {report['device']}.",
        f"Gap: |loss - loss_32| / |loss_32| at each step, both losses averaged over the last "
        f"{window} steps (`precision_ab.smooth_steps`); threshold {percent(threshold)} "
        "(`precision_ab.threshold`).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in report["precisions"]:
        gap = row["gap"] or {}
        cells = [
            row["precision_requested"],
            row["precision_effective"],
            _num(row["final_loss"], ".4f"),
            _gap(gap.get("final"), bool(gap)),
            f"{_gap(gap.get('largest'), bool(gap))} (step {gap['largest_step']})" if gap else "",
            _num(row["steps_per_s"], ".1f"),
            _bytes(row["activation_bytes"]),
            *([_bytes(row["peak_memory_bytes"])] if gpu else []),
            row["verdict"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "![loss curves and the gap to float32](precision_ab.png)",
        "",
        "steps/s: wall time of steps 2 to N (the first step pays for warm-up). activations: "
        "bytes autograd saved for backward in the first training batch (activations, plus the "
        "low-precision weight copies autocast makes), on rank 0."
        + (" peak memory: torch.cuda.max_memory_allocated over the run." if gpu else ""),
        "",
    ]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Loss per step of every precision above; below, each one's smoothed gap to float32
    with the threshold."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and in CI
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True, height_ratios=(3, 2))
    for row in report["precisions"]:
        loss = [float("nan") if x is None else x for x in row["loss"]]
        top.plot(row["steps"], loss, linewidth=1, label=row["precision_requested"])
        gap = row["gap"]
        if gap:
            values = [float("nan") if g is None else 100 * g for g in gap["values"]]
            (line,) = bottom.plot(
                gap["steps"], values, linewidth=1.2, label=row["precision_requested"]
            )
            if gap["exceeded_at"] is not None:  # also where the gap stops being finite
                bottom.axvline(gap["exceeded_at"], color=line.get_color(), linestyle=":")
    bottom.axhline(100 * report["threshold"], color="grey", linestyle="--", label="threshold")
    top.set(ylabel="training loss", title=f"Precision A/B: {report.get('model', '')}")
    top.legend()
    bottom.set(
        xlabel="step", ylabel=f"gap to float32 (%)\nmean of last {report['smooth_steps']} steps"
    )
    bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _gap(value: float | None, present: bool) -> str:
    if not present:
        return ""
    return "not finite" if value is None else percent(value)


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _bytes(value: int | None) -> str:
    if value is None:
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value} B"
