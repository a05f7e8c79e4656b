"""What ties a trial's run to its study: the pruning callback's trial number, the moved
sweep directory, and the trackers' grouping (a W&B group; MLflow nested runs in one
sweep-wide store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from litforge.sweeps import search_space
from litforge.sweeps.objectives import PRUNING_CALLBACK

MLFLOW_DEFAULT_URI = "sqlite:///${run_dir}/mlflow.db"  # conf/logger/mlflow.yaml


def overrides(config: Any, number: int, study_name: str, sweep_dir: Path,
              moved_to: Path | None) -> list[str]:  # fmt: skip
    """The overrides of trial `number`'s job that tie it to study `study_name`."""
    found = []
    if moved_to is not None:  # each job composes its config anew
        found.append(f"hydra.sweep.dir={search_space.override_value(str(moved_to))}")
    if OmegaConf.select(config, PRUNING_CALLBACK) is not None:
        found.append(f"{PRUNING_CALLBACK}.trial={number}")
    if OmegaConf.select(config, "logger.wandb") is not None:
        found.append(f"logger.wandb.group={study_name}")
    mlflow = OmegaConf.select(config, "logger.mlflow")
    if mlflow is not None:
        found.append(f"logger.mlflow.parent_run={study_name}")
        uri = OmegaConf.to_container(mlflow, resolve=False).get("tracking_uri")
        if uri == MLFLOW_DEFAULT_URI:  # per-run stores would split the study: one for all
            found.append(f"logger.mlflow.tracking_uri=sqlite:///{sweep_dir.absolute()}/mlflow.db")
    return found
