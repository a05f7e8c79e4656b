"""`python train.py -m a=1,2 b=x,y`: Hydra's basic sweeper runs the grid's jobs one after
another, and a value litforge's checks refuse in job 5 ends the sweep after jobs 0-4 have
trained. Before Hydra starts, every job's config is composed and checked here; the first
refusal is one line naming the job and its overrides. Other sweepers check their own
trials (litforge's Optuna sweeper: before the first trial)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hydra import compose as hydra_compose
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import open_dict

from litforge.errors import ConfigError
from litforge.validation.checks import check_config
from litforge.validation.config_search import hydra_configs


def check_grid_jobs(argv: list[str], config_name: str, conf_dir: str | None) -> None:
    if not ({"-m", "--multirun"} & set(argv)):
        return
    args = [a for a in argv if not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException:
        return  # Hydra says what is wrong with them
    if not any(o.is_sweep_override() for o in parsed):
        return
    with hydra_configs(conf_dir):
        try:
            whole = hydra_compose(config_name, overrides=_plain(parsed), return_hydra_config=True)
        except HydraException:
            return  # composition errors: Hydra's own, as before
        if not str(whole.hydra.sweeper.get("_target_", "")).endswith(".BasicSweeper"):
            return
        params = [f"{k}={v}" for k, v in (whole.hydra.sweeper.get("params") or {}).items()]
        jobs = BasicSweeper.split_arguments(
            OverridesParser.create().parse_overrides([*params, *args]), None
        )[0]
        with tempfile.TemporaryDirectory() as tmp:
            for number, overrides in enumerate(jobs):
                _check_job(config_name, overrides, Path(tmp) / str(number), number)


def _plain(parsed: list) -> list[str]:
    """The overrides without the sweeps (the config every job shares)."""
    return [o.input_line for o in parsed if not o.is_sweep_override() and o.input_line]


def _check_job(config_name: str, overrides: list[str], run_dir: Path, number: int) -> None:
    try:
        cfg = hydra_compose(config_name, overrides=overrides)
    except HydraException as err:
        first = str(err).strip().splitlines()[0]
        raise ConfigError(f"sweep job {number} ({' '.join(overrides)}): {first}") from None
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    try:
        check_config(cfg)
    except ConfigError as err:
        raise ConfigError(f"sweep job {number} ({' '.join(overrides)}): {err}") from None


__all__ = ["check_grid_jobs"]
