"""A plain Hydra app (not litforge's train.py), as hydra-optuna-sweeper's examples are:
swept with `hydra/sweeper=litforge_optuna`. `mode` picks what the job returns."""

from __future__ import annotations

import os
import signal
import time

import hydra
import numpy as np
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg: DictConfig) -> object:
    if cfg.mode == "fail":
        raise RuntimeError("this trial fails")
    time.sleep(float(os.environ.get("TRIAL_SLEEP", "0")))  # workers' trials overlap
    hang = os.environ.get("HANG_ONCE")
    if hang and not os.path.exists(hang):  # the first trial hangs until its worker is killed
        open(hang, "w").close()
        time.sleep(600)
    marker = os.environ.get("TERM_ONCE")
    if marker and not os.path.exists(marker):  # a spot notice while this trial runs
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGTERM)
    value = cfg.scale * ((cfg.x - 0.5) ** 2 + cfg.y + cfg.get("z", 0.0))
    if cfg.mode == "multi":  # two objectives: the value and x itself
        return value, float(cfg.x)
    return np.float64(value) if cfg.mode == "numpy" else value


def extend(cfg: DictConfig, trial: object) -> None:
    """custom_search_space: a parameter the sweep's own params do not name."""
    trial.suggest_float("z", 0.0, 1.0)  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
