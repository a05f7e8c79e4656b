"""What a sweep leaves in its directory: trials.csv, best.yaml, plots, and a printed table.

A multi-objective study has no single best: best.yaml then holds its Pareto-optimal trials
(none better in every objective), and pareto_front.png plots them against the others."""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import warnings
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from litforge.sweeps.study import (
    BEST_CHECKPOINT,
    DEVICES,
    DURATION,
    ERROR,
    NOT_COUNTED,
    RETRY_OF,
    RUN_DIR,
    STOPPED,
)

log = logging.getLogger("litforge")
MIN_TRIALS_FOR_IMPORTANCE = 4


def write(study: optuna.Study, sweep_dir: Path, objectives: list[str]) -> list[FrozenTrial]:
    """Write trials.csv, best.yaml and the plots into sweep_dir; returns the best trial (or
    the Pareto-optimal ones), none before a trial completes."""
    trials = study.get_trials(deepcopy=False)
    _atomic(sweep_dir / "trials.csv", _trials_csv(trials, objectives))
    best = _best(study)
    if best:
        record = (
            _best_record(study, best[0])
            if len(objectives) == 1
            else _pareto(study, best, objectives)
        )
        _atomic(sweep_dir / "best.yaml", yaml.safe_dump(record, sort_keys=False))
    try:
        import matplotlib

        # A project's module may set text.usetex at import (LaTeX labels for its papers);
        # these plots need no LaTeX, and a machine without it would fail to draw them.
        with matplotlib.rc_context({"text.usetex": False}):
            if len(objectives) == 1:
                _plot(study, trials, sweep_dir)
            else:
                _plot_pareto(study, objectives, sweep_dir)
    except Exception as err:  # noqa: BLE001 - a plot never fails the sweep it reports on
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        log.warning(
            "sweep report: the plots could not be drawn (%s: %s); trials.csv and best.yaml "
            "are written", type(err).__name__, reason,
        )  # fmt: skip
    return best


def best_line(
    study: optuna.Study, best: list[FrozenTrial], objectives: list[str], sweep_dir: Path
) -> str:
    if not best:
        return f"no complete trial in study {study.study_name} yet"
    if len(objectives) > 1:
        numbers = ", ".join(str(t.number) for t in best)
        return f"pareto front: trials {numbers} -> {sweep_dir / 'best.yaml'}"
    one = best[0]
    return f"best: trial {one.number} {objectives[0]}={one.value:.6g} {one.params} -> {sweep_dir / 'best.yaml'}"


def table(study: optuna.Study, objectives: list[str], rows: int = 10) -> str:
    """The best `rows` finished trials, best first (a multi-objective study: its Pareto
    front), one line each, and a count by state."""
    trials = study.get_trials(deepcopy=False)
    if len(objectives) == 1:
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        done.sort(key=lambda t: t.value, reverse=study.direction.name == "MAXIMIZE")
    else:
        done = _best(study)
    names = sorted({k for t in trials for k in t.params})
    lines = [f"study {study.study_name}: " + ", ".join(
        f"{sum(t.state == s for t in trials)} {s.name.lower()}"
        for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)
    )]  # fmt: skip
    header = ["trial", *objectives, *names]
    body = [
        [str(t.number), *(f"{v:.6g}" for v in t.values), *(_short(t.params.get(n)) for n in names)]
        for t in done[:rows]
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    for row in [header, *body]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _best(study: optuna.Study) -> list[FrozenTrial]:
    if len(study.directions) > 1:
        return sorted(study.best_trials, key=lambda t: t.number)
    try:
        return [study.best_trial]
    except ValueError:  # no completed trial yet
        return []


def _pareto(study: optuna.Study, front: list[FrozenTrial], objectives: list[str]) -> dict[str, Any]:
    return {
        "study": study.study_name,
        "directions": {
            name: d.name.lower() for name, d in zip(objectives, study.directions, strict=True)
        },
        "pareto_front": [
            {
                "trial": t.number,
                "values": dict(zip(objectives, t.values, strict=True)),
                "params": dict(t.params),
                "run_dir": t.user_attrs.get(RUN_DIR),
                "best_checkpoint": t.user_attrs.get(BEST_CHECKPOINT),
            }
            for t in front
        ],
    }


def _best_record(study: optuna.Study, best: FrozenTrial) -> dict[str, Any]:
    return {
        "study": study.study_name,
        "trial": best.number,
        "value": best.value,
        "direction": study.direction.name.lower(),
        "params": dict(best.params),
        "run_dir": best.user_attrs.get(RUN_DIR),
        "best_checkpoint": best.user_attrs.get(BEST_CHECKPOINT),
    }


def _trials_csv(trials: list[FrozenTrial], objectives: list[str]) -> str:
    names = sorted({k for t in trials for k in t.params})
    out = io.StringIO()
    writer = csv.writer(out)
    columns = ["value"] if len(objectives) == 1 else objectives
    where = ["devices"] if any(DEVICES in t.user_attrs for t in trials) else []
    writer.writerow(["number", "state", *columns, "duration_s", *names, *where, "run_dir", "note"])
    for t in trials:
        # Optuna's duration runs from a batch's ask to its tell: the whole batch's time.
        duration = t.user_attrs.get(DURATION)
        if duration is None and t.duration is not None:
            duration = t.duration.total_seconds()
        values = t.values if t.values is not None else [None] * len(columns)
        writer.writerow([
            t.number, t.state.name, *values, None if duration is None else round(duration, 3),
            *(t.params.get(n) for n in names), *(t.user_attrs.get(DEVICES) for _ in where),
            t.user_attrs.get(RUN_DIR), _note(t),
        ])  # fmt: skip
    return out.getvalue()


def _note(trial: FrozenTrial) -> str:
    parts = []
    if RETRY_OF in trial.system_attrs:
        parts.append(f"retry of trial {trial.system_attrs[RETRY_OF]}")
    for key in (NOT_COUNTED, STOPPED):
        if key in trial.system_attrs:
            parts.append(str(trial.system_attrs[key]))
    if ERROR in trial.user_attrs:
        parts.append(str(trial.user_attrs[ERROR]))
    return "; ".join(parts)


def _plot(study: optuna.Study, trials: list[FrozenTrial], sweep_dir: Path) -> None:
    """optimization_history.png (each trial's value, the best so far) and, with enough
    complete trials, param_importances.png (Optuna's fANOVA importances)."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and math.isfinite(t.value)]
    if not done:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    better = max if study.direction.name == "MAXIMIZE" else min
    best_so_far, running = [], None
    for t in done:
        running = t.value if running is None else better(running, t.value)
        best_so_far.append(running)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([t.number for t in done], [t.value for t in done], "o", label="trial")
    ax.step([t.number for t in done], best_so_far, where="post", label="best so far")
    ax.set(xlabel="trial", ylabel="objective", title=f"{study.study_name}: optimization history")
    ax.legend()
    fig.tight_layout()
    fig.savefig(sweep_dir / "optimization_history.png", dpi=100)
    plt.close(fig)

    params = {k for t in done for k in t.params}
    if len(done) < MIN_TRIALS_FOR_IMPORTANCE or not params:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fANOVA's sklearn forest on a handful of points
            importances = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError) as err:  # e.g. every trial with the same parameters
        log.info("no parameter importances: %s", err)
        return
    fig, ax = plt.subplots(figsize=(6, 0.5 + 0.4 * len(importances)))
    ax.barh(list(importances)[::-1], list(importances.values())[::-1])
    ax.set(xlabel="importance (fANOVA)", title=f"{study.study_name}: parameter importances")
    fig.tight_layout()
    fig.savefig(sweep_dir / "param_importances.png", dpi=100)
    plt.close(fig)


def _plot_pareto(study: optuna.Study, objectives: list[str], sweep_dir: Path) -> None:
    """pareto_front.png: every complete trial in the first two objectives, the front marked."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not done:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = {t.number for t in _best(study)}
    fig, ax = plt.subplots(figsize=(6, 4))
    for on_front, label in ((False, "trial"), (True, "Pareto-optimal")):
        chosen = [t for t in done if (t.number in front) == on_front]
        ax.plot([t.values[0] for t in chosen], [t.values[1] for t in chosen], "o", label=label)
    ax.set(xlabel=objectives[0], ylabel=objectives[1], title=f"{study.study_name}: Pareto front")
    ax.legend()
    fig.tight_layout()
    fig.savefig(sweep_dir / "pareto_front.png", dpi=100)
    plt.close(fig)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _atomic(path: Path, text: str) -> None:
    """Workers sharing a sweep directory each rewrite these files: never a torn read."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
