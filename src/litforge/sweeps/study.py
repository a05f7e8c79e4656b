"""An Optuna study that outlives its workers: storage, sampler, pruner, leases and retries.

Storage: a journal file (the default, in the sweep directory; many workers on one machine or
on shared storage) or a SQLAlchemy URL (sqlite:///..., postgresql://...).

A trial is *leased* by the worker that runs it: the worker's host, pid and a heartbeat in
the trial's system attributes, renewed every `heartbeat_s`. A RUNNING trial whose worker is
gone (a dead pid on this host at once; elsewhere a heartbeat older than `stale_s`) was
interrupted: it is failed, marked as not counting, and a WAITING copy with the same
parameters is queued. The copy runs in the same run directory, so it resumes from the
interrupted trial's last checkpoint. Optuna's own heartbeat does not serve here: it exists
only for RDBStorage (not journals), its API is experimental, and it cannot tell a dead local
process before the grace period ends.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from litforge.checkpointing.lock import holder_alive
from litforge.errors import ConfigError, redact_url
from litforge.sweeps.samplers import directions_for, pruner_for

log = logging.getLogger("litforge")

JOURNAL_NAME = "optuna.journal"
LEASE = "litforge:lease"  # {"host", "pid", "heartbeat"} of the worker running the trial
RETRY_OF = "litforge:retry_of"  # the trial number whose run (directory, checkpoints) this continues
NOT_COUNTED = "litforge:not_counted"  # why a failed trial does not count toward n_trials
STOPPED = "litforge:stopped"  # set by the run: "pruned" or "not finite", with the step
RUN_DIR = "litforge:run_dir"
BEST_CHECKPOINT = "litforge:best_checkpoint"
ERROR = "litforge:error"
DEVICES = "litforge:devices"  # ids (and GPU UUIDs) a trial ran on, under hydra/launcher=gpus
DURATION = "litforge:duration_s"  # a trial's own time, where its launcher measured it


def storage_for(storage: str | None, sweep_dir: Path, attempts: int = 5) -> BaseStorage:
    """A journal file (None: sweep_dir/optuna.journal; a path) or an RDB at a SQLAlchemy URL.

    Only litforge's own place (the sweep directory) is created: a directory the user named
    must exist, or a mistyped shared path would give each machine a study of its own.
    """
    if not storage or "://" not in str(storage):
        path = Path(storage) if storage else Path(sweep_dir) / JOURNAL_NAME
        try:
            if storage:
                _named_parent_exists(str(storage), path)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        except OSError as err:
            raise ConfigError(
                f"hydra.sweeper.storage={path}: cannot open the journal ({err})"
            ) from None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    try:
        url = make_url(str(storage))
    except ArgumentError:
        url = None  # reported by RDBStorage below, the password hidden
    database = url.database if url is not None and url.get_backend_name() == "sqlite" else None
    if database and database != ":memory:" and not database.startswith("file:"):
        _named_parent_exists(redact_url(str(storage)), Path(database))
    for attempt in range(attempts):
        try:
            return RDBStorage(str(storage))
        except Exception as err:  # noqa: BLE001 - reported below, the URL's password hidden
            # Two workers creating the tables of a fresh database at once: one of them fails
            # ("table studies already exists", or "UNIQUE constraint failed:
            # alembic_version.version_num"); the tables exist by the next attempt.
            if isinstance(err, SQLAlchemyError) and attempt + 1 < attempts:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise ConfigError(
                f"hydra.sweeper.storage={redact_url(str(storage))}: cannot open it "
                f"({type(err).__name__}: {str(err).splitlines()[0][:200]}); use a journal file "
                "path, sqlite:///PATH or a reachable postgresql://... / mysql://... URL"
            ) from None
    raise AssertionError("unreachable")


def _named_parent_exists(given: str, path: Path) -> None:
    parent = path.absolute().parent
    if not parent.is_dir():
        raise ConfigError(
            f"hydra.sweeper.storage={given}: directory {parent} does not exist (litforge "
            f"creates only its default, the sweep directory); create it first, e.g. "
            f"mkdir -p {parent}, or correct the path"
        )


def study_name_of(settings: Mapping[str, Any], job_name: str) -> str:
    """hydra.sweeper.study_name; null (lightning-hydra-template's configs): the job name,
    so a rerun finds the same study."""
    name = settings.get("study_name")
    return str(name) if name is not None else job_name


def open_study(settings: Mapping[str, Any], sweep_dir: Path, study_name: str) -> optuna.Study:
    """Create the study, or load it when it exists (another worker's, or an earlier run's)."""
    # Optuna's INFO lines ("Using an existing study", "Trial 3 finished") repeat what the
    # sweep prints itself; its warnings stay.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        storage=storage_for(settings.get("storage"), sweep_dir),
        study_name=study_name,
        pruner=pruner_for(settings),
        directions=directions_for(settings),
        load_if_exists=True,
    )


# ---- leases and the trials that count -------------------------------------------------


class Leases:
    """The heartbeat of the trials this worker runs (a daemon thread)."""

    def __init__(self, study: optuna.Study, heartbeat_s: float) -> None:
        self.study, self.heartbeat_s = study, heartbeat_s
        self.trial_ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._beat, name="litforge-sweep-lease", daemon=True).start()

    def take(self, trial_id: int) -> None:
        self._renew(trial_id)
        with self._lock:
            self.trial_ids.add(trial_id)

    def drop(self, trial_id: int) -> None:
        with self._lock:
            self.trial_ids.discard(trial_id)

    def close(self) -> None:
        self._stop.set()

    def _renew(self, trial_id: int) -> None:
        record = {"host": socket.gethostname(), "pid": os.getpid(), "heartbeat": time.time()}
        self.study._storage.set_trial_system_attr(trial_id, LEASE, record)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with self._lock:
                ids = list(self.trial_ids)
            for trial_id in ids:
                try:
                    self._renew(trial_id)
                except Exception as err:  # noqa: BLE001 - a finished trial, or a storage blip
                    log.debug("lease of trial %s not renewed: %s", trial_id, err)


def reap_stale(study: optuna.Study, stale_s: float, mine: Iterable[int] = ()) -> list[int]:
    """Fail the RUNNING trials whose worker is gone and queue a retry of each; their numbers.
    `mine`: the ids of trials this process runs now (a trial by trial sweep asks while its
    own run), never reaped; any other lease of this pid is an earlier run's."""
    reaped, held = [], set(mine)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial._trial_id in held:
            continue
        lease = trial.system_attrs.get(LEASE)
        if lease is not None and holder_alive(lease, stale_s):
            continue
        if lease is None and time.time() - trial.datetime_start.timestamp() < stale_s:
            continue  # just asked by a worker that has not written its lease yet
        if interrupt(study, trial, "its worker is gone"):
            reaped.append(trial.number)
    return reaped


def interrupt(study: optuna.Study, trial: FrozenTrial, why: str, started: bool = True) -> bool:
    """Fail `trial` without counting it and queue a copy that continues its run (or, one
    that never started, runs it); False when another worker got there first."""
    storage = study._storage
    try:
        note = f"interrupted: {why}" if started else f"not started: {why}"
        storage.set_trial_system_attr(trial._trial_id, NOT_COUNTED, note)
        if not storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
            return False
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    study.add_trial(
        optuna.create_trial(
            state=TrialState.WAITING,
            params=trial.params,
            distributions=trial.distributions,
            system_attrs={RETRY_OF: lineage(trial)},
        )
    )
    if started:
        log.warning(
            "trial %d was interrupted (%s); it will be retried, resuming its run",
            trial.number, why,
        )  # fmt: skip
    else:
        log.warning("trial %d was not started (%s); the same command runs it", trial.number, why)
    return True


def lineage(trial: FrozenTrial) -> int:
    """The number of the first trial of a retry chain: its run directory's name."""
    return int(trial.system_attrs.get(RETRY_OF, trial.number))


def counts(trial: FrozenTrial) -> bool:
    """Finished, and not set aside (interrupted, a config error, surplus)."""
    return trial.state.is_finished() and NOT_COUNTED not in trial.system_attrs


def live_lineages(trials: Iterable[FrozenTrial]) -> list[int]:
    """Lineages that have finished (counted) or are still going, in order of their first trial."""
    live = {
        lineage(t)
        for t in trials
        if counts(t) or t.state in (TrialState.RUNNING, TrialState.WAITING)
    }
    return sorted(live)


def trial_of_this_job(number: int) -> optuna.Trial:
    """Trial `number` of the study the running Hydra job belongs to (from its sweeper config)."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get()
    given = hydra.sweeper.get("study_name")
    name = str(given) if given is not None else str(hydra.job.name)
    study = open_study(hydra.sweeper, Path(hydra.sweep.dir), name)
    trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    return optuna.Trial(study, trial_id)
