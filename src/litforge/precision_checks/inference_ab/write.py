"""The inference-precision report as a page, JSON and a figure, in the run directory:
inference_precision.md, .json and .png (the precision A/B's forms)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NAME = "inference_precision"


def markdown(found: dict[str, Any]) -> str:
    keys = sorted({k for row in found["precisions"] for k in row["metrics"]})
    header = ["precision", "ran as", *keys, "largest gap", "verdict"]
    lines = [
        "# Inference precision",
        "",
        f"{found.get('checkpoint', 'the checkpoint')}, tested in each precision; gap: (metric - "
        f"metric_32) / |metric_32|; threshold {found['threshold']:.1%} (`inference.threshold`).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in found["precisions"]:
        gaps = row["gaps"]
        worst = max(gaps.values(), key=abs, default=None)
        cells = [row["precision"], row["ran_as"] or "-",
                 *(f"{row['metrics'][k]:.4f}" if k in row["metrics"] else "-" for k in keys),
                 "-" if worst is None else f"{worst:+.2%}", row["verdict"]]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"![gap to float32 per metric]({NAME}.png)", ""]
    return "\n".join(lines)


def plot(found: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    rows = [r for r in found["precisions"] if r["gaps"] and r["precision"] != "32"]
    keys = sorted({k for r in rows for k in r["gaps"]})
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(len(keys), 1)
    for i, key in enumerate(keys):
        ax.bar([j + i * width for j in range(len(rows))],
               [100 * r["gaps"].get(key, 0.0) for r in rows], width, label=key)  # fmt: skip
    ax.set_xticks([j + width * (len(keys) - 1) / 2 for j in range(len(rows))])
    ax.set_xticklabels([r["precision"] for r in rows])
    for sign in (1, -1):
        ax.axhline(sign * 100 * found["threshold"], color="grey", linestyle="--", linewidth=1)
    ax.set_ylabel("gap to float32 (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(found: dict[str, Any], run_dir: Path) -> Path:
    (run_dir / f"{NAME}.json").write_text(json.dumps(found, indent=2) + "\n")
    (run_dir / f"{NAME}.md").write_text(markdown(found))
    plot(found, run_dir / f"{NAME}.png")
    return run_dir / f"{NAME}.md"
