"""lightning-hydra-template's sweep config as its users have it (hydra-optuna-sweeper's
`_target_`, `storage: null`, `study_name: null`, no sweep directory of its own), in a
project's conf/ directory: it runs on litforge's sweeper, and rerunning the same command
after a lost machine resumes the study instead of repeating it."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import CONF, ROOT

# configs/hparams_search/mnist_optuna.yaml, its keys adapted to litforge's example model.
MNIST_OPTUNA = """\
# @package _global_
defaults:
  - override /hydra/sweeper: optuna
optimized_metric: "val/acc"
hydra:
  mode: "MULTIRUN"
  sweeper:
    _target_: hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper
    storage: null
    study_name: null
    n_jobs: 1
    direction: maximize
    n_trials: 20
    sampler:
      _target_: optuna.samplers.TPESampler
      seed: 1234
      n_startup_trials: 10
    params:
      model.optimizer.lr: interval(0.0001, 0.1)
      data.batch_size: choice(32, 64, 128, 256)
      model.net.hidden: choice(64, 128, 256)
"""
# The machine is lost (SIGKILL) at step 5 of trial 1, once: after its step-3 checkpoint.
COMMAND = [
    "train.py", "hparams_search=mnist_optuna", "debug=limit", "test=false",
    "hydra.sweeper.n_trials=3", "+callbacks.kill._target_=tests.sweeps.callbacks.KillOnceInRun",
    "+callbacks.kill.step=5", "+callbacks.kill.run=1",
]  # fmt: skip
UPSTREAM = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def project(tmp_path: Path) -> Path:
    """A project made from this one: its conf/ plus the config above, its train.py."""
    shutil.copytree(CONF, tmp_path / "conf")
    (tmp_path / "conf" / "hparams_search" / "mnist_optuna.yaml").write_text(MNIST_OPTUNA)
    shutil.copy(ROOT / "train.py", tmp_path / "train.py")
    return tmp_path


def run(cwd: Path, *command: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    environment.update(CI="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        [sys.executable, *command], cwd=cwd, env=environment, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def test_an_lht_sweep_config_runs_and_its_rerun_resumes(tmp_path):
    home = project(tmp_path)
    lost = run(home, *COMMAND)
    assert lost.returncode == -9, lost.stderr[-3000:]
    out = lost.stdout + lost.stderr
    warned = [line for line in out.splitlines() if UPSTREAM in line]
    assert len(warned) == 1 and "runs litforge's Optuna sweeper" in warned[0], out[-3000:]
    assert "Traceback" not in out and "Unknown plugin" not in out
    study_dir = home / "multirun" / "train" / "mnist_optuna"  # not named after the time
    assert [p.name for p in (home / "multirun" / "train").iterdir()] == ["mnist_optuna"]
    assert (study_dir / "optuna.journal").is_file() and (study_dir / "1" / "checkpoints").is_dir()

    again = run(home, *COMMAND)  # the same command, in the same place
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    assert "#0 :" not in out  # trial 0 finished in the first run: not launched again
    assert "trial 1 was interrupted (its worker is gone)" in out
    assert "trial 2 continues trial 1" in out
    assert "resuming from" in (study_dir / "1" / "train.log").read_text()
    with (study_dir / "trials.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["number"], r["state"]) for r in rows] == [
        ("0", "COMPLETE"), ("1", "FAIL"), ("2", "COMPLETE"), ("3", "COMPLETE")
    ]  # fmt: skip
    assert rows[2]["note"] == "retry of trial 1" and rows[2]["run_dir"] == str(study_dir / "1")


def test_an_installed_hydra_optuna_sweeper_keeps_its_target(tmp_path):
    """Where hydra-optuna-sweeper is installed, its `_target_` is its own plugin."""
    plugin = tmp_path / "hydra_plugins" / "hydra_optuna_sweeper"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("")
    (plugin / "optuna_sweeper.py").write_text(
        "from hydra.plugins.sweeper import Sweeper\n\n\n"
        "class OptunaSweeper(Sweeper):\n"
        "    def setup(self, **kwargs):\n        pass\n\n"
        "    def sweep(self, arguments):\n        return []\n"
    )
    code = (
        "from hydra.core.plugins import Plugins\n"
        f"found = Plugins.instance().class_name_to_class[{UPSTREAM!r}]\n"
        "print(found.__module__, found.__mro__[1].__module__)\n"
    )
    installed = run(tmp_path, "-c", code)  # `python -c` imports from its working directory
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert installed.stdout.split() == [UPSTREAM.rpartition(".")[0], "hydra.plugins.sweeper"]
    (tmp_path / "elsewhere").mkdir()
    alone = run(tmp_path / "elsewhere", "-c", code)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert alone.stdout.split() == [
        UPSTREAM.rpartition(".")[0], "hydra_plugins.litforge_optuna.optuna_sweeper"
    ]  # fmt: skip


# Slow (~20 s, two train.py sweeps); make test covers it in-process: test_trial_dirs's
# new-study-name directory case and its two-studies-in-one-sweep-directory case.
@pytest.mark.slow
def test_a_new_study_name_runs_its_own_trials_not_the_last_studys(tmp_path):
    """docs/sweeps.md's advice, "start a new study_name for a new space", in an LHT project:
    the second study neither resumes the first's checkpoints nor reports its values."""
    home = project(tmp_path)
    base = ["train.py", "hparams_search=mnist_optuna", "debug=limit", "test=false",
            "trainer.max_epochs=1", "hydra.sweeper.n_trials=1"]  # fmt: skip
    studies = {}
    for name in ("lr_search", "lr_search_v2"):
        done = run(home, *base, f"hydra.sweeper.study_name={name}")
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-3000:]
        assert "already finished" not in out and "Traceback" not in out
        study_dir = Path(re.search(r"-> (\S+)/best.yaml", out).group(1))  # where it went
        with (study_dir / "trials.csv").open() as f:
            studies[name] = list(csv.DictReader(f))
        log = (study_dir / "0" / "train.log").read_text()
        assert "resuming from" not in log and "no checkpoint in" in log, log[-2000:]
    first, second = studies["lr_search"], studies["lr_search_v2"]
    # Each named after its study: its own journal, trials.csv and best.yaml.
    assert sorted(p.name for p in (home / "multirun" / "train").iterdir()) == list(studies)
    assert len(first) == len(second) == 1 and second[0]["state"] == "COMPLETE"
    assert second[0]["run_dir"] == str(home / "multirun" / "train" / "lr_search_v2" / "0")
    assert second[0]["model.optimizer.lr"] != first[0]["model.optimizer.lr"]
    best = yaml.safe_load((home / "multirun/train/lr_search_v2/best.yaml").read_text())
    assert best["params"]["model.optimizer.lr"] == float(second[0]["model.optimizer.lr"])
    assert Path(best["run_dir"]).parent.name == "lr_search_v2"
