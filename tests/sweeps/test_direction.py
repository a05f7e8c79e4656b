"""A sweep's `hydra.sweeper.direction` sets the mode of the monitors that watch the optimized
metric (checkpoint ranking, early stopping) unless the user set one: lightning-hydra-template's
configs say `direction: maximize` and no `optimized_mode`, and kept the worst checkpoints."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from litforge import build, checkpointing
from litforge.callbacks.early_stopping import EarlyStop
from litforge.checkpointing.callback import StoreCheckpoint
from litforge.validation import monitor_mode
from tests.sweeps.test_upstream_config import project, run

LHT = "hparams_search=mnist_optuna"  # test_upstream_config's copy of LHT's mnist_optuna.yaml
TWO = "optimized_metric=[val/acc,val/loss]"


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Callable[..., DictConfig]]:
    """job(*overrides): one trial's config as Hydra hands it to train(), HydraConfig set
    (the sweep's keys are there, not in the config); the full config is `job.full`."""
    home = project(tmp_path / "home")

    def make(*overrides: str) -> DictConfig:
        with initialize_config_dir(config_dir=str(home / "conf"), version_base="1.3"):
            cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
        make.full = cfg.copy()  # type: ignore[attr-defined]
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
            cfg.run_dir = str(tmp_path / "run")
        return cfg

    yield make
    HydraConfig.instance().cfg = None


def test_the_built_monitors_of_an_lht_sweep_follow_its_direction(job):
    cfg = job(LHT, "callbacks=[default,early_stopping]")
    checkpoints = checkpointing.setup(cfg)
    try:
        trainer = build.build_trainer(cfg, checkpoints.callbacks)
    finally:
        checkpoints.release()
    ranking = [c for c in trainer.callbacks if isinstance(c, StoreCheckpoint)]
    stopping = [c for c in trainer.callbacks if isinstance(c, EarlyStop)]
    assert [(c.monitor, c.mode) for c in ranking] == [("val/acc", "max")]
    assert [(c.monitor, c.mode) for c in stopping] == [("val/acc", "max")]


@pytest.mark.parametrize(
    ("overrides", "checkpoint", "stopping"),
    [
        ([LHT], "max", "max"),
        ([LHT, "hydra.sweeper.direction=minimize"], "min", "min"),
        ([LHT, "hydra.sweeper.direction=[maximize,minimize]", TWO, "checkpoint.monitor=val/acc"],
         "max", "max"),
        ([LHT, "hydra.sweeper.direction=[minimize,maximize]", TWO, "checkpoint.monitor=val/acc"],
         "min", "min"),
        ([LHT, "optimized_mode=min"], "min", "min"),  # set by the user: kept (and warned)
        ([LHT, "checkpoint.mode=min"], "min", "max"),
        (["hparams_search=digits_optuna"], "max", "max"),  # litforge's: optimized_mode: max
        ([], "min", "min"),  # no sweep
        (["hydra/sweeper=optuna"], "min", "min"),  # its direction is optimized_mode's
    ],
    ids=["lht", "minimize", "multi-max-first", "multi-min-first", "user-mode", "user-ckpt-mode",
         "litforge-config", "no-sweep", "default-direction"],
)  # fmt: skip
def test_the_monitors_mode_in_the_trial(job, overrides, checkpoint, stopping):
    cfg = job(*overrides, "callbacks=[default,early_stopping]")
    assert (cfg.checkpoint.mode, cfg.callbacks.early_stopping.mode) == (checkpoint, stopping)


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["optimized_mode=min"], "but optimized_mode=min ranks the lowest val/acc best; set it to max"),
        (["checkpoint.mode=min", "optimized_mode=min"],
         "but optimized_mode=min, checkpoint.mode=min rank the lowest val/acc best; set them to max"),
        (["checkpoint.mode=min"], "but checkpoint.mode=min ranks the lowest val/acc best; set it to"),
        (["checkpoint.mode=min", "checkpoint.monitor=val/loss"], None),  # not the swept metric
        (["checkpoint.mode=max"], None),
        ([], None),
    ],
)  # fmt: skip
def test_a_mode_the_user_set_against_the_direction_is_one_line(job, overrides, said):
    job(LHT, *overrides)
    line = monitor_mode.contradiction(job.full, job.full.hydra.sweeper.direction)
    if said is None:
        assert line is None
    else:
        assert line.startswith("hydra.sweeper.direction=maximize for val/acc, ") and said in line
        assert line.endswith("out to follow the direction")


@pytest.mark.slow
def test_a_real_lht_sweep_ranks_by_its_direction_and_warns_once_against_it(tmp_path):
    command = ["train.py", LHT, "debug=limit", "test=false", "hydra.sweeper.n_trials=1"]
    home = project(tmp_path / "a")
    done = run(home, *command)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    trial = yaml.safe_load((home / "multirun/train/mnist_optuna/0/config.yaml").read_text())
    assert (trial["optimized_mode"], trial["checkpoint"]["mode"]) == ("max", "max")
    assert "hydra.sweeper.direction=" not in out

    against = run(project(tmp_path / "b"), *command, "optimized_mode=min")
    out = against.stdout + against.stderr
    assert against.returncode == 0, out[-3000:]
    warned = [line for line in out.splitlines() if "hydra.sweeper.direction=maximize" in line]
    assert len(warned) == 1 and "but optimized_mode=min ranks the lowest val/acc best" in warned[0]
