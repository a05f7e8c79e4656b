"""A plan in words: rows per card (its cheapest setting that fits, then its fastest), the
JSON of every card and count, and a PNG of cost against time."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from litforge.planning.budget.report import size
from litforge.planning.plan.economics import Spot
from litforge.planning.plan.search import Setting


@dataclass(frozen=True)
class Option:
    """One card x count: its fastest setting that fits (None: nothing fits), time, cost."""

    card: str
    count: int
    setting: Setting | None
    total_s: float | None = None
    on_demand: float | None = None  # cost of the run
    spot: Spot | None = None
    spot_cost: float | None = None

    @property
    def card_hours(self) -> float | None:
        return None if self.total_s is None else self.total_s / 3600 * self.count


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, length in (("d", 86400), ("h", 3600), ("min", 2 * 60), ("s", 1)):
        if seconds >= length:
            return f"{seconds / length:.1f} {unit}"
    return f"{seconds * 1000:.3g} ms"


def money(value: float | None, currency: str) -> str:
    return "-" if value is None else f"{value:,.2f} {currency}"


def picks(options: list[Option]) -> list[tuple[str, Option]]:
    """Per card: the cheapest option that fits (by on-demand cost, else card-hours), then
    the fastest when it is another."""
    found = []
    for card in dict.fromkeys(o.card for o in options):
        fitting = [o for o in options if o.card == card and o.setting is not None]
        if not fitting:
            found.append(("fits nowhere", next(o for o in options if o.card == card)))
            continue
        cheapest = min(fitting, key=lambda o: (_cost(o), o.total_s))
        fastest = min(fitting, key=lambda o: (o.total_s, _cost(o)))
        found.append(("cheapest", cheapest))
        if fastest is not cheapest:
            found.append(("fastest", fastest))
    return found


def _cost(option: Option) -> float:
    return option.on_demand if option.on_demand is not None else option.card_hours or 0.0


COLUMNS = ("card", "pick", "GPUs", "precision, micro x accumulation, ...", "memory/GPU", "step", "run",
           "on demand", "spot (expected)", "spot wall", "checkpoint every")  # fmt: skip


def lines(options: list[Option], currency: str, max_count: int) -> list[str]:
    grid = [list(COLUMNS)]
    for pick, o in picks(options):
        s = o.setting
        if s is None:
            grid.append([o.card, pick, f"1-{max_count}", "does not fit", *["-"] * 7])
            continue
        every = f"{o.spot.every_n_train_steps} steps" if o.spot else "-"
        grid.append([
            o.card, pick, str(o.count), s.brief(o.count), size(s.memory),
            duration(s.step_s), duration(o.total_s), money(o.on_demand, currency),
            money(o.spot_cost, currency), duration(o.spot.wall_s if o.spot else None), every,
        ])  # fmt: skip
    widths = [max(len(row[i]) for row in grid) for i in range(len(COLUMNS))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in grid
    ]


def as_json(options: list[Option]) -> list[dict[str, Any]]:
    rows = []
    for o in options:
        row = asdict(o)
        row["fits"] = o.setting is not None
        row["overrides"] = o.setting.overrides(o.count) if o.setting else None
        rows.append(row)
    return rows


def write_png(options: list[Option], path: Path, currency: str) -> None:
    """Cost against time, one point per card and count that fits."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for o in options:
        if o.setting is None or o.total_s is None:
            continue
        cost = o.on_demand if o.on_demand is not None else o.card_hours
        ax.scatter(o.total_s / 3600, cost)
        ax.annotate(f"{o.count}x {o.card}", (o.total_s / 3600, cost), fontsize=7)
    ax.set_xlabel("time to trainer.max_steps (hours)")
    ax.set_ylabel(f"on-demand cost ({currency})" if any(o.on_demand for o in options)
                  else "card-hours")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
