"""litforge's Optuna sweeper: `python train.py -m hparams_search=digits_optuna`.

A Hydra sweeper plugin on Optuna's ask-and-tell API (hydra-optuna-sweeper pins optuna<3 and
its fallback release fails with SQLAlchemy 2). The loop itself is `litforge.sweeps.sweep`:
Hydra imports every plugin module on every run, so optuna is imported only for a sweep.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import logging
import sys
import types
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
        "study_name": None, "storage": None, "n_trials": 20, "n_jobs": 1, "schedule": "trials",
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
    from litforge.sweeps.signals import refuse_to_start

    with errors_to_caller():
        refuse_to_start()  # the sweep got a signal while this trial was being launched
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


UPSTREAM_PACKAGE = "hydra_plugins.hydra_optuna_sweeper"
UPSTREAM_MODULE = f"{UPSTREAM_PACKAGE}.optuna_sweeper"


def _upstream_alias() -> type | None:
    """litforge's sweeper under hydra-optuna-sweeper's `_target_`, which
    lightning-hydra-template's hparams_search configs name, where that plugin is not
    installed (where it is, a config naming it gets it)."""
    shim = sys.modules.get(UPSTREAM_MODULE)
    if shim is not None:  # ours, from an earlier plugin scan of this process; or upstream's
        return getattr(shim, "LITFORGE_ALIAS", None)
    if importlib.util.find_spec(UPSTREAM_PACKAGE) is not None:
        return None

    class UpstreamNamedOptunaSweeper(OptunaSweeper):
        def __init__(self, **settings: Any) -> None:
            logging.getLogger("litforge").warning(
                "hydra.sweeper._target_=%s.OptunaSweeper (hydra-optuna-sweeper, not "
                "installed) runs litforge's Optuna sweeper; name it %s.OptunaSweeper to say so",
                UPSTREAM_MODULE, __name__,
            )  # fmt: skip
            super().__init__(**settings)

    # Hydra finds a plugin by its class's module and name, and instantiates it by importing
    # that path: both must name upstream's class, so the path is made importable.
    alias = UpstreamNamedOptunaSweeper
    alias.__module__, alias.__name__, alias.__qualname__ = (
        UPSTREAM_MODULE,
        "OptunaSweeper",
        "OptunaSweeper",
    )
    package = types.ModuleType(UPSTREAM_PACKAGE, "litforge's stand-in for hydra-optuna-sweeper")
    package.__path__ = []
    package.__spec__ = importlib.machinery.ModuleSpec(UPSTREAM_PACKAGE, None, is_package=True)
    module = types.ModuleType(UPSTREAM_MODULE)
    module.__spec__ = importlib.machinery.ModuleSpec(UPSTREAM_MODULE, None)
    module.OptunaSweeper = module.LITFORGE_ALIAS = alias
    package.optuna_sweeper = module
    sys.modules.update({UPSTREAM_PACKAGE: package, UPSTREAM_MODULE: module})
    return alias


UpstreamNamedOptunaSweeper = _upstream_alias()
