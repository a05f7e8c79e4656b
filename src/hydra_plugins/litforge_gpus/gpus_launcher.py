"""`hydra/launcher=gpus`: every trial of a sweep a process of its own, on devices of its own.

A Hydra launcher plugin for any sweeper (litforge's Optuna sweeper, Hydra's basic one) and
any Hydra app. Hydra imports every plugin module on every run, so the work is in
`litforge.sweeps.pool`, imported only when a sweep launches.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

# For any other Hydra app. litforge's own apps (the same test as litforge_conf's search path)
# get the documented YAML, hydra/launcher/gpus.yaml in pkg://litforge.conf, generated from
# the same schema: both under one name would make Hydra match the YAML against this node as
# a schema, with a deprecation warning.
if "litforge.cli" not in sys.modules:
    from litforge.sweeps.pool.settings import LauncherSettings  # the schema alone: no torch

    ConfigStore.instance().store(
        group="hydra/launcher",
        name="gpus",
        provider="litforge",
        node={"_target_": LauncherSettings.TARGET, **LauncherSettings.defaults()},
    )


BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


class TrialFailed(SystemExit):
    """A failed trial under Hydra's basic sweeper, which raises the first failed job's
    error: Python prints this one line and exits 1, where Hydra would print a traceback."""


class _OneLineReturn(JobReturn):
    """A JobReturn whose failure is raised without Hydra's extra "Error executing job" line
    (the launcher has said which trial ended how)."""

    @property
    def return_value(self) -> Any:
        if self.status == JobStatus.COMPLETED:
            return self._return_value
        raise self._return_value


class GpusLauncher(Launcher):
    """The keys are litforge.sweeps.pool.settings.LauncherSettings' (documented there and in
    conf/hydra/launcher/gpus.yaml)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.entry: list[str] | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Checks the settings and how a trial runs the app, before the sweeper asks for any
        trial. task_function is not called here: each job runs in a process of its own."""
        from litforge.exits import report_user_errors
        from litforge.sweeps.pool import entry, settings

        self.config, self.hydra_context = config, hydra_context
        with report_user_errors():
            settings.check(self.settings)
            self.entry = entry.entry_command(task_function)

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from litforge.errors import ConfigError
        from litforge.exits import report_user_errors
        from litforge.sweeps.pool.launcher import launch

        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        basic = self.config.hydra.sweeper.get("_target_") == BASIC_SWEEPER
        try:
            returns = launch(
                self.settings, loader, self.config, job_overrides, initial_job_idx, self.entry
            )
        except ConfigError as err:  # a device not visible, a trial's trainer.devices
            if basic:
                with report_user_errors():  # one line, before any trial starts
                    raise
            # Another sweeper (litforge's Optuna) gets it as each job's outcome: it stops
            # on a config error in one line, where an exception from the launcher would
            # count the batch's trials as interrupted ones to retry.
            refused = [_OneLineReturn(overrides=list(o), status=JobStatus.FAILED)
                       for o in job_overrides]  # fmt: skip
            for ret in refused:
                ret._return_value = err
            return refused
        if basic:
            return [_one_line(r) if r.status == JobStatus.FAILED else r for r in returns]
        return returns

    def launch_each(self, feed: Any, at_once: int) -> None:
        """Trials one by one, not batches: each asked from `feed` (its `ask`, `started`,
        `tell`: litforge.sweeps.trial_feed) as soon as its devices are free, at most
        `at_once` running. litforge's Optuna sweeper uses it where a launcher has it."""
        from litforge.sweeps.pool.launcher import launch_each

        assert self.config is not None and self.hydra_context is not None
        launch_each(self.settings, self.hydra_context.config_loader, self.config, feed,
                    at_once, self.entry)  # fmt: skip


def _one_line(ret: JobReturn) -> JobReturn:
    """The failed job's return, with its error as the one line the basic sweeper raises."""
    err = ret._return_value
    num = ret.hydra_cfg.hydra.job.num if ret.hydra_cfg is not None else "?"
    where = f" (its output: {ret.working_dir}/launcher.log)" if ret.working_dir else ""
    said = str(err)
    line = f"trial job #{num} ({' '.join(ret.overrides)}) failed: {type(err).__name__}: {said}"
    copy = _OneLineReturn(**{f.name: getattr(ret, f.name) for f in dataclasses.fields(JobReturn)})
    copy._return_value = TrialFailed(
        "error: " + line + (where if "launcher.log" not in said else "")
    )
    return copy
