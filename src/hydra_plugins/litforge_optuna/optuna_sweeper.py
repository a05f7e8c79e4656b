"""litforge's Optuna sweeper: `python train.py -m hparams_search=digits_optuna`.

A Hydra sweeper plugin on Optuna's ask-and-tell API (hydra-optuna-sweeper pins optuna<3 and
its fallback release fails with SQLAlchemy 2). The loop itself is `litforge.sweeps.sweep`:
Hydra imports every plugin module on every run, so optuna is imported only for a sweep.
"""

from __future__ import annotations

import functools
from typing import Any

from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from litforge.exits import errors_to_caller


def _run_trial(task_function: TaskFunction, cfg: DictConfig) -> Any:
    """One trial: a litforge error comes back to the sweeper as an exception (it decides
    whether the sweep goes on) instead of ending the process."""
    with errors_to_caller():
        return task_function(cfg)


class OptunaSweeper(Sweeper):
    """The keys are those of conf/hydra/sweeper/optuna.yaml (documented there)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Any = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context,
            task_function=functools.partial(_run_trial, task_function),
            config=config,
        )

    def sweep(self, arguments: list[str]) -> list[JobReturn]:
        from litforge.sweeps.sweep import Sweep

        return Sweep(self).run(arguments)
