"""litforge's Optuna sweeper: `python train.py -m hparams_search=digits_optuna`.

A Hydra sweeper plugin on Optuna's ask-and-tell API (hydra-optuna-sweeper pins optuna<3 and
its fallback release fails with SQLAlchemy 2). The loop itself is `litforge.sweeps.sweep`:
Hydra imports every plugin module on every run, so optuna is imported only for a sweep.
"""

from __future__ import annotations

import functools
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

# `hydra/sweeper=litforge_optuna` in any Hydra app (litforge's own apps get the documented
# YAML, hydra/sweeper/optuna.yaml in pkg://litforge.conf, with their recipe's defaults).
ConfigStore.instance().store(
    group="hydra/sweeper",
    name="litforge_optuna",
    provider="litforge",
    node={
        "_target_": "hydra_plugins.litforge_optuna.optuna_sweeper.OptunaSweeper",
        "_recursive_": False,  # a sampler node is built per trial, with that trial's seed
        "study_name": None, "storage": None, "n_trials": 20, "n_jobs": 1,
        "direction": "minimize", "sampler": "tpe", "sampler_options": {}, "pruner": "none",
        "pruner_options": {}, "seed": None, "max_failure_rate": 1.0,
        "custom_search_space": None, "heartbeat_s": 30, "stale_s": 300, "params": {},
    },
)  # fmt: skip


def _run_trial(task_function: TaskFunction, cfg: DictConfig) -> Any:
    """One trial: a litforge error comes back to the sweeper as an exception (it decides
    whether the sweep goes on) instead of ending the process."""
    # Here, not at import: Hydra imports every plugin module in every run of every app in
    # the environment, and litforge.exits imports lightning.
    from litforge.exits import errors_to_caller

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
