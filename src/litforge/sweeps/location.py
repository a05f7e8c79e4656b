"""Where a sweep lives when its config leaves that to litforge.

With the default storage (`hydra.sweeper.storage: null`) the study's journal is in the sweep
directory. A sweep directory that names the time (litforge's and Hydra's default
`multirun/.../${now:...}`, lightning-hydra-template's `.../multiruns/${now:...}`) would give
every rerun a new, empty study, so a preempted sweep would repeat every trial. Such a
directory is made stable instead: its part before the time, then the study's name, as
conf/hparams_search/digits_optuna.yaml writes it, `multirun/${task_name}/${hydra.sweeper.study_name}`.
A study left unnamed (`study_name: null`, lightning-hydra-template's configs; or litforge's
default, the task name) is named there by its hparams_search option instead, so that two
options do not share a directory. Either way a new `study_name` gets a directory, a journal
and trial directories of its own: trials of two studies never share a run directory.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, flag_override

log = logging.getLogger("litforge")
TIME = "${now:"


def stable_sweep_dir(
    config: DictConfig, settings: Mapping[str, Any], study_name: str
) -> Path | None:
    """Point hydra.sweep.dir of `config` at a directory the same command finds again when
    the study lives there and the directory names the time; the new directory, else None."""
    if settings.get("storage"):
        return None  # the study is found by its storage; the directory is the user's
    raw = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("dir")
    if not isinstance(raw, str) or TIME not in raw:
        return None
    parts = raw.split("/")
    first_timed = next(i for i, part in enumerate(parts) if TIME in part)
    name = directory_name(config, study_name)
    stable = "/".join([*parts[:first_timed], str(name)])
    with flag_override(config, ["struct", "readonly"], [False, False]):
        config.hydra.sweep.dir = stable
        try:
            resolved = Path(str(config.hydra.sweep.dir)).absolute()
        except Exception:  # noqa: BLE001 - the time inside another interpolation: keep it
            config.hydra.sweep.dir = raw
            return None
        config.hydra.sweep.dir = str(resolved)
    log.info(
        "study %s lives in %s, not in a directory named after the time, so that the same "
        "command resumes it (hydra.sweep.dir or hydra.sweeper.storage put it elsewhere)",
        study_name, resolved,
    )  # fmt: skip
    return resolved


def directory_name(config: DictConfig, study_name: str) -> str:
    """The study's name; for a study named by default (the job's name) the hparams_search
    option, when there is one."""
    choices = OmegaConf.select(config, "hydra.runtime.choices", default=None) or {}
    option = choices.get("hparams_search")
    unnamed = study_name == str(OmegaConf.select(config, "hydra.job.name", default=""))
    return str(option) if option and unnamed else study_name
