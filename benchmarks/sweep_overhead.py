"""Figure `sweep_overhead`: wall time of a 4-trial digits Optuna sweep over the sum of its
trials' own time, and where the rest goes.

The sweep runs as a fresh `python train.py -m hparams_search=digits_optuna` process (CI=1,
one thread, pruning off so all 4 trials train fully). A trial's own time is Optuna's, from
ask to tell (composing its config, building, fit, test, the run record). The rest is
split into start-up (process start to the first trial: imports, Hydra, opening the
study), between trials (telling, asking, the launcher), and the end (trials.csv,
best.yaml, plots). Start-up is paid once per sweep process, not per trial.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import optuna

from benchmarks.harness import ROOT, scratch_dir
from benchmarks.stats import Figure

N_TRIALS = 4


def one_sweep() -> dict[str, float]:
    """Seconds: wall, trials (sum), startup, between, end."""
    sweep_dir = scratch_dir() / "sweep"
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    argv = [
        sys.executable, "train.py", "-m", "hparams_search=digits_optuna",
        f"hydra.sweeper.n_trials={N_TRIALS}", "hydra.sweeper.pruner=none",
        f"hydra.sweep.dir={sweep_dir}",
    ]  # fmt: skip
    start = time.time()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True)
    end = time.time()
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(sweep_dir / "optuna.journal"))
    )
    trials = optuna.load_study(study_name="digits_optuna", storage=storage).get_trials()
    shutil.rmtree(sweep_dir.parent, ignore_errors=True)
    starts = [t.datetime_start.timestamp() for t in trials]
    ends = [t.datetime_complete.timestamp() for t in trials]
    own = sum(e - s for s, e in zip(starts, ends, strict=True))
    return {
        "wall": end - start,
        "trials": own,
        "startup": starts[0] - start,
        "between": sum(s - e for s, e in zip(starts[1:], ends[:-1], strict=True)),
        "end": end - ends[-1],
    }


def measure(repeats: int = 2) -> dict[str, Figure]:
    runs = [one_sweep() for _ in range(repeats)]
    ratio = [r["wall"] / r["trials"] for r in runs]
    parts = {k: round(sorted(r[k] for r in runs)[len(runs) // 2], 2) for k in runs[0]}
    note = (
        f"{N_TRIALS} digits trials, seconds (median run): wall {parts['wall']}, trials "
        f"{parts['trials']}, start-up {parts['startup']} (once per sweep process), between "
        f"trials {parts['between']}, end {parts['end']} (report and plots)"
    )
    return {"sweep_overhead": Figure.of(ratio, "x", note=note, extra=parts)}
