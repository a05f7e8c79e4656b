"""How the sweep records a finished job: COMPLETE, PRUNED, FAIL (counted, or set aside as a
config error), or interrupted (queued to continue); and the note a failed trial keeps.

A run's own error advises how to go on ("the same command resumes from that checkpoint",
"a rerun starts over"). In a sweep that holds only for an interrupted trial, which the
sweep retries; a counted failure is never run again, so its note says that instead.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path

import optuna
from hydra.core.utils import JobReturn
from optuna.trial import TrialState

from litforge.errors import ConfigError, LitforgeError
from litforge.sweeps import objectives, signals
from litforge.sweeps import study as studies
from litforge.sweeps.study import BEST_CHECKPOINT, ERROR, NOT_COUNTED, STOPPED

log = logging.getLogger("litforge")
Stop = tuple[int | None, LitforgeError]  # the trial that stopped the sweep (None: none), why

FAILED = "the sweep counts this trial as failed and does not run it again"
CONFIG_FIX = "once it is fixed, a rerun runs a new trial in its place"
CONFIG_ERROR = f"config error: not counted; {CONFIG_FIX}"
# The advice of litforge's run errors (resume_hint in litforge.checkpointing.configure, the
# numerics stop), from the claim to the end of its clause.
_RUN_ADVICE = re.compile(r"(?:the same command(?: plus \S+)? resumes|a rerun starts over)[^;]*")


def true_in_a_sweep(message: str, instead: str) -> str:
    """`message` with a run's advice on going on replaced by what the sweep does."""
    return _RUN_ADVICE.sub(instead, message)


def tell(
    study: optuna.Study,
    trial: optuna.Trial,
    result: JobReturn,
    names: Sequence[str],
    in_process: bool,
) -> Stop | None:
    """Record one finished job (`names`: the objectives); why the sweep must stop, if so."""
    try:
        raw = result.return_value
        values = objectives.values_of(raw, len(names))
    except ConfigError as err:  # the same for every trial: stop here
        trial.storage.set_trial_system_attr(trial._trial_id, NOT_COUNTED, CONFIG_ERROR)
        trial.set_user_attr(ERROR, true_in_a_sweep(str(err), CONFIG_FIX)[:500])
        study.tell(trial, state=TrialState.FAIL)
        return trial.number, err
    except signals.NotStarted as err:  # a signal came before its code ran: not a trial yet
        frozen = study._storage.get_trial(trial._trial_id)
        studies.interrupt(study, frozen, err.why, started=False)
        return None, signals.SweepStopped(err.signum, study.study_name)
    except LitforgeError as err:  # preempted, store unreachable: continue it next time
        if not err.interrupts:  # the trial's own failure (a NaN): below
            return _failed(study, trial, err)
        studies.interrupt(study, study._storage.get_trial(trial._trial_id), str(err))
        return (trial.number, err) if in_process else None  # in-process: this machine's
    except Exception as err:  # noqa: BLE001 - the trial's own failure; the sweep goes on
        return _failed(study, trial, err)
    run_dir = Path(str(result.hydra_cfg.hydra.runtime.output_dir)) if result.hydra_cfg else None
    best_checkpoint = _best_checkpoint(run_dir)
    if best_checkpoint:
        trial.set_user_attr(BEST_CHECKPOINT, best_checkpoint)
    stopped = str(study._storage.get_trial(trial._trial_id).system_attrs.get(STOPPED, ""))
    if stopped.startswith("pruned"):
        study.tell(trial, state=TrialState.PRUNED)
    elif values is None:
        trial.set_user_attr(ERROR, f"{', '.join(names)} is {raw}")
        study.tell(trial, state=TrialState.FAIL)
        log.warning("trial %d failed: %s is %s", trial.number, ", ".join(names), raw)
    else:
        study.tell(trial, values if len(values) > 1 else values[0])
    return None


def failure_rate_stop(
    study: optuna.Study,
    batch: Sequence[optuna.Trial],
    max_failure_rate: float,
    of: str = "of the batch",
) -> Stop | None:
    """hydra.sweeper.max_failure_rate, per batch as upstream (trial by trial: the last
    n_jobs trials to end): past it the sweep stops with the first failed trial's error."""
    failed = [t for t in batch if study._storage.get_trial(t._trial_id).state == TrialState.FAIL]
    if not failed or len(failed) / len(batch) <= max_failure_rate:
        return None
    error = study._storage.get_trial(failed[0]._trial_id).user_attrs.get(ERROR, "failed")
    return failed[0].number, LitforgeError(
        f"{error}; {len(failed)} of {len(batch)} trials {of} failed, more "
        f"than hydra.sweeper.max_failure_rate={max_failure_rate}"
    )


def _failed(study: optuna.Study, trial: optuna.Trial, err: BaseException) -> None:
    note = true_in_a_sweep(f"{type(err).__name__}: {err}", FAILED)
    trial.set_user_attr(ERROR, note[:500])
    study.tell(trial, state=TrialState.FAIL)
    log.warning("trial %d failed: %s", trial.number, note)


def _best_checkpoint(run_dir: Path | None) -> str | None:
    try:
        return json.loads((run_dir / "metrics.json").read_text()).get("best_checkpoint")
    except (OSError, ValueError, TypeError, AttributeError):
        return None
