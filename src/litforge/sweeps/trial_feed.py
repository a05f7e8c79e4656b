"""Trial by trial under `hydra/launcher=gpus`: the device pool asks the study for one trial
the moment devices for it are free, and tells each outcome as it comes.

Hydra's sweeper protocol hands a launcher batches and waits for the whole batch, so a fast
or pruned trial would leave its device idle until the slowest of its batch ends (Hydra
declined to change that: facebookresearch/hydra#3091). litforge owns both the Optuna
sweeper and the launcher, so the sweep gives the launcher this feed instead of a batch:
`ask` is Optuna's ask (a queued retry first), `told` its tell.
"""

from __future__ import annotations

import collections
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from hydra.core.utils import JobReturn
from hydra.errors import HydraException

from litforge.errors import ConfigError
from litforge.sweeps import outcomes, search_space, signals
from litforge.sweeps import study as studies
from litforge.sweeps.pool.feed import LATER

if TYPE_CHECKING:
    from litforge.sweeps.sweep import Sweep

log = logging.getLogger("litforge")


class TrialFeed:
    """One worker's trials of `study`, asked one at a time, up to `n_trials` in the study
    (this worker's and the others'); `window` trials to end are what max_failure_rate
    judges, as a batch of n_jobs would be."""

    def __init__(self, sweep: Sweep, study: optuna.Study, space: search_space.SearchSpace,
                 sweep_dir: Path, leases: studies.Leases, n_trials: int, window: int,
                 stale_s: float) -> None:  # fmt: skip
        self.sweep, self.study, self.space, self.sweep_dir = sweep, study, space, sweep_dir
        self.leases, self.n_trials, self.stale_s = leases, n_trials, stale_s
        self.open: dict[int, optuna.Trial] = {}  # asked, not told: by number
        self.ended: collections.deque[optuna.Trial] = collections.deque(maxlen=window)
        self.returns: list[JobReturn] = []
        self.next_look = 0.0  # when the others hold the rest: look again then

    def ask(self) -> tuple[int, list[str]] | str | None:
        sweep, study = self.sweep, self.study
        if sweep.stopped_by is not None or sweep._signalled(study):
            return None
        if time.monotonic() < self.next_look:
            return LATER
        studies.reap_stale(study, self.stale_s, [t._trial_id for t in self.open.values()])
        trials = study.get_trials(deepcopy=False)
        done = sum(studies.counts(t) for t in trials)
        running = sum(t.state == optuna.trial.TrialState.RUNNING for t in trials)
        if done >= self.n_trials:
            return None
        if self.n_trials - done - running <= 0:  # the others (or ours) hold the rest
            self.next_look = time.monotonic() + min(5.0, self.stale_s / 4)
            return LATER
        asked = sweep._ask(study, self.space, 1, self.n_trials, self.leases)
        if not asked:  # a signal, or surplus (another worker asked the last one)
            return None if sweep._signalled(study) else LATER
        trial = asked[0]
        self.open[trial.number] = trial
        overrides = sweep._job(study, self.space, trial, self.sweep_dir)
        try:
            sweep.validate_batch_is_legal([overrides])
        except HydraException as err:
            raise ConfigError(f"trial overrides {overrides}: {err}") from None
        if sweep._signalled(study):  # asking and composing take a while: once more
            why = signals.NotStarted(sweep.watch.received).why
            self._close(trial)
            studies.interrupt(study, study._storage.get_trial(trial._trial_id), why, False)
            return None
        return trial.number, overrides

    def told(self, idx: int, result: JobReturn) -> None:
        trial = self._close(self.open[idx])
        self.sweep._tell(self.study, trial, result)
        self.returns.append(result)
        self.ended.append(trial)
        self.next_look = 0.0  # the study changed: look at once
        if len(self.ended) == self.ended.maxlen and self.sweep.stopped_by is None:
            stop = outcomes.failure_rate_stop(
                self.study, list(self.ended), self.sweep.max_failure_rate, "of the last to end"
            )
            if stop is not None:
                self.sweep.stopped_by = stop

    def abandon(self, why: str) -> None:
        """The trials asked and not told (the launch failed, Ctrl-C): each continues next
        time."""
        for trial in list(self.open.values()):
            self._close(trial)
            studies.interrupt(self.study, self.study._storage.get_trial(trial._trial_id), why)

    def _close(self, trial: optuna.Trial) -> optuna.Trial:
        self.open.pop(trial.number, None)
        self.leases.drop(trial._trial_id)
        return trial
