"""The sweep loop of the Optuna sweeper (hydra_plugins.litforge_optuna): ask, launch, tell.

`hydra.sweeper.n_trials` counts finished trials (complete, pruned, failed): rerunning the same
command runs only the missing ones; several workers on one storage share them. Each trial is
one job of Hydra's launcher, in the sweep directory's subdirectory named after the trial (a
retried trial reuses the directory of the trial it continues, so it resumes from its
checkpoints; a directory that records another study's trial or other parameters is never
reused: litforge.sweeps.trial_dirs).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from omegaconf import OmegaConf
from optuna.trial import TrialState

from litforge import hooks
from litforge.errors import ConfigError, LitforgeError
from litforge.exits import report_user_errors
from litforge.sweeps import (
    location,
    objectives,
    outcomes,
    report,
    samplers,
    search_space,
    settings,
    signals,
    trial_dirs,
    trial_ties,
)
from litforge.sweeps import study as studies
from litforge.sweeps.settings import SweeperSettings
from litforge.sweeps.study import DEVICES, DURATION, NOT_COUNTED, RETRY_OF, RUN_DIR
from litforge.sweeps.trial_feed import TrialFeed
from litforge.validation import monitor_mode

log = logging.getLogger("litforge")


class Sweep:
    """One worker's part of a study. `sweeper` is the Hydra plugin: its settings (the keys
    of hydra.sweeper), the composed config, the launcher and its batch validation."""

    def __init__(self, sweeper: Any) -> None:
        self.settings = sweeper.settings
        self.config = sweeper.config
        self.launcher = sweeper.launcher
        self.validate_batch_is_legal = sweeper.validate_batch_is_legal
        self.hydra_context = getattr(sweeper, "hydra_context", None)
        given = self.config.get("optimized_metric")  # run() checks them against the directions
        self.objectives = (
            [str(m) for m in given] if OmegaConf.is_list(given) else [str(given or "value")]
        )
        self.stopped_by: tuple[int | None, LitforgeError] | None = None
        self.watch = signals.SignalWatch()
        self.moved_to: Path | None = None  # the stable sweep directory (sweeps.location)

    def run(self, arguments: list[str]) -> list[JobReturn]:
        with report_user_errors():
            settings.check_keys(self.settings)
            space = search_space.parse(
                self.settings.get("params"), arguments, self.config, self._is_group
            )
            n_trials, n_jobs = self._positive("n_trials"), self._positive("n_jobs")
            self.max_failure_rate = settings.failure_rate_limit(self.settings)
            self.extend = settings.search_space_extender(self.settings)
            self.objectives = objectives.objective_names(
                self.config, self.settings, len(samplers.directions_for(self.settings))
            )
            if clash := monitor_mode.contradiction(self.config, self.settings.get("direction")):
                log.warning(clash)
            name = studies.study_name_of(self.settings, str(self.config.hydra.job.name))
            self.moved_to = location.stable_sweep_dir(self.config, self.settings, name)
            sweep_dir = Path(self.config.hydra.sweep.dir)
            sweep_dir.mkdir(parents=True, exist_ok=True)
            study = studies.open_study(self.settings, sweep_dir, name)
            by_trial = self._trial_by_trial()
            self.sampler_for = samplers.sampler_factory(
                self.settings, space.grid, study.study_name, parallel=by_trial
            )
            if self.settings.get("sampler") == "grid":
                n_trials = min(n_trials, math.prod(len(v) for v in space.grid().values()))
            search_space.check_against_study(space, study)
            search_space.say_pinned(space, study)
            if not space.distributions and self.extend is None:
                log.warning(
                    "nothing is searched (hydra.sweeper.params and the command line leave no "
                    "parameter to sample): the study runs n_trials=%d repeats of the same config%s",
                    n_trials, self._seed_note(),
                )  # fmt: skip
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        log.info("study %s in %s: %d trials", study.study_name, sweep_dir, n_trials)

        returns: list[JobReturn] = []
        leases = studies.Leases(
            study, float(self.settings.get("heartbeat_s", SweeperSettings.heartbeat_s))
        )
        stale_s = float(self.settings.get("stale_s", SweeperSettings.stale_s))
        try:
            with report_user_errors(), self.watch.active():
                if by_trial:
                    window = min(n_jobs, n_trials)
                    feed = TrialFeed(self, study, space, sweep_dir, leases, n_trials, window,
                                     stale_s)  # fmt: skip
                    returns = self._feed_launcher(feed, n_jobs)
                else:
                    returns = self._batches(study, space, sweep_dir, leases, n_trials, n_jobs)
        finally:
            leases.close()
        best = report.write(study, sweep_dir, self.objectives)
        print(report.table(study, self.objectives), flush=True)
        print(report.best_line(study, best, self.objectives, sweep_dir), flush=True)
        if self.stopped_by is not None:
            number, err = self.stopped_by
            where = "" if number is None else f"trial {number}: "
            print(f"error: {where}{err}", file=sys.stderr, flush=True)
            sys.exit(err.exit_code)
        if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            print(f"error: no trial of study {study.study_name} finished (see "
                  f"{sweep_dir / 'trials.csv'})", file=sys.stderr, flush=True)  # fmt: skip
            sys.exit(1)
        return returns

    def _batches(self, study: optuna.Study, space: search_space.SearchSpace, sweep_dir: Path,
                 leases: studies.Leases, n_trials: int, n_jobs: int) -> list[JobReturn]:  # fmt: skip
        """Hydra's protocol: up to n_jobs trials asked, launched, and told once all ended."""
        returns: list[JobReturn] = []
        stale_s = float(self.settings.get("stale_s", SweeperSettings.stale_s))
        while self.stopped_by is None and not self._signalled(study):
            studies.reap_stale(study, stale_s)
            trials = study.get_trials(deepcopy=False)
            done = sum(studies.counts(t) for t in trials)
            running = sum(t.state == TrialState.RUNNING for t in trials)
            if done >= n_trials:
                break
            free = n_trials - done - running
            if free <= 0:  # other workers hold the rest; wait for them (or their leases)
                time.sleep(min(5.0, stale_s / 4))
                continue
            batch = self._ask(study, space, min(n_jobs, free), n_trials, leases)
            if batch:
                returns += self._run(study, space, batch, sweep_dir, leases)
        return returns

    def _trial_by_trial(self) -> bool:
        """Whether the launcher takes trials one by one (hooks.LaunchesEach: gpus), unless
        hydra.sweeper.schedule=batches; any other launcher gets batches of n_jobs."""
        schedule = settings.schedule(self.settings)
        return schedule == "trials" and hooks.launch_each_of(self.launcher) is not None

    def _feed_launcher(self, feed: TrialFeed, n_jobs: int) -> list[JobReturn]:
        """The device pool, asking `feed` for each trial as devices free (n_jobs at most
        at once); the trials it asked and did not tell continue next time."""
        try:
            self.launcher.launch_each(feed, n_jobs)
        except BaseException as err:
            feed.abandon(repr(err))
            raise
        return feed.returns

    def _signalled(self, study: optuna.Study) -> bool:
        """Whether a signal has come: then no trial starts (and the sweep stops)."""
        if self.watch.received is not None and self.stopped_by is None:
            self.stopped_by = (None, signals.SweepStopped(self.watch.received, study.study_name))
        return self.watch.received is not None

    def _seed_note(self) -> str:
        seed = OmegaConf.select(self.config, "seed", default=None)
        return "" if seed is None else f", each with seed={seed}"

    def _is_group(self, name: str) -> bool:
        loader = getattr(self.hydra_context, "config_loader", None)
        return loader is not None and bool(loader.get_group_options(name.lstrip("+~")))

    def _positive(self, key: str) -> int:
        value = self.settings.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"hydra.sweeper.{key}={value} must be an integer >= 1")
        return value

    def _ask(
        self,
        study: optuna.Study,
        space: search_space.SearchSpace,
        count: int,
        n_trials: int,
        leases: studies.Leases,
    ) -> list[optuna.Trial]:
        """Up to `count` trials (queued retries first). A fresh trial beyond n_trials (another
        worker asked at the same moment) is set aside as surplus."""
        batch = []
        for _ in range(count):
            if self._signalled(study):
                break
            study.sampler = self.sampler_for(len(study.get_trials(deepcopy=False)))
            trial = study.ask()
            try:  # suggested one by one: a refusal must not leave a RUNNING trial behind
                for name, dist in space.distributions.items():
                    trial._suggest(name, dist)
                if self.extend is not None:
                    self.extend(self.config, trial)  # more trial.suggest_* (custom_search_space)
            except Exception as err:
                trial.storage.set_trial_system_attr(trial._trial_id, NOT_COUNTED, "not asked")
                study.tell(trial, state=TrialState.FAIL)
                raise ConfigError(f"trial {trial.number}: the search space: {err}") from None
            leases.take(trial._trial_id)
            frozen = study._storage.get_trial(trial._trial_id)
            if RETRY_OF not in frozen.system_attrs:
                live = studies.live_lineages(study.get_trials(deepcopy=False))
                if live.index(trial.number) >= n_trials:
                    trial.storage.set_trial_system_attr(trial._trial_id, NOT_COUNTED, "surplus")
                    study.tell(trial, state=TrialState.FAIL)
                    leases.drop(trial._trial_id)
                    break
            batch.append(trial)
        return batch

    def _run(
        self,
        study: optuna.Study,
        space: search_space.SearchSpace,
        batch: Sequence[optuna.Trial],
        sweep_dir: Path,
        leases: studies.Leases,
    ) -> list[JobReturn]:
        try:
            jobs = [self._job(study, space, trial, sweep_dir) for trial in batch]
            try:
                self.validate_batch_is_legal(jobs)
            except HydraException as err:
                raise ConfigError(f"trial overrides {jobs[0]}: {err}") from None
            if self._signalled(study):  # asking and composing take a while: once more
                why = signals.NotStarted(self.watch.received).why
                for trial in batch:
                    frozen = study._storage.get_trial(trial._trial_id)
                    studies.interrupt(study, frozen, why, started=False)
                    leases.drop(trial._trial_id)
                return []
            self.watch.rearm()
            results = self.launcher.launch(jobs, initial_job_idx=batch[0].number)
        except BaseException as err:
            for trial in batch:  # Ctrl-C, a failed launch: these trials continue next time
                studies.interrupt(study, study._storage.get_trial(trial._trial_id), repr(err))
            raise
        for trial, result in zip(batch, results, strict=True):
            self._tell(study, trial, result)
            leases.drop(trial._trial_id)
        stop = outcomes.failure_rate_stop(study, batch, self.max_failure_rate)
        if stop is not None and self.stopped_by is None:
            self.stopped_by = stop
        return list(results)

    def _job(
        self,
        study: optuna.Study,
        space: search_space.SearchSpace,
        trial: optuna.Trial,
        sweep_dir: Path,
    ) -> list[str]:
        """The overrides of `trial`'s job, in the run directory that is its own."""
        frozen = study._storage.get_trial(trial._trial_id)
        line = studies.lineage(frozen)
        owner = trial_dirs.Owner(study.study_name, line, dict(frozen.params))
        run_dir = trial_dirs.claim(sweep_dir, owner)
        overrides = [*space.overrides(trial.params), f"hydra.sweep.subdir={run_dir.name}"]
        overrides += self.trial_overrides(trial.number, study.study_name, sweep_dir)
        trial.set_user_attr(RUN_DIR, str(run_dir.absolute()))
        if line != trial.number:
            log.info("trial %d continues trial %d in %s", trial.number, line, run_dir)
        return overrides

    def trial_overrides(self, number: int, study_name: str, sweep_dir: Path) -> list[str]:
        return trial_ties.overrides(self.config, number, study_name, sweep_dir, self.moved_to)

    def _tell(self, study: optuna.Study, trial: optuna.Trial, result: JobReturn) -> None:
        """Record one finished job (litforge.sweeps.outcomes); the first reason to stop wins."""
        # This machine's trials (in this process, or the device pool's processes): an
        # interruption (a signal, a store outage) stops the sweep here too.
        in_process = type(self.launcher).__name__ in ("BasicLauncher", "GpusLauncher")
        devices = getattr(result, "devices", None)  # hydra/launcher=gpus says where it ran
        if devices:
            uuids = getattr(result, "device_uuids", None) or []
            trial.set_user_attr(DEVICES, " ".join(map(str, devices + uuids)))
        duration = getattr(result, "duration_s", None)  # the trial's own time (trials.csv)
        if duration is not None:
            trial.set_user_attr(DURATION, round(float(duration), 3))
        stop = outcomes.tell(study, trial, result, self.objectives, in_process)
        if stop is not None and self.stopped_by is None:
            self.stopped_by = stop
