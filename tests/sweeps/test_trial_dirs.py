"""A sweep's results are its own: a new study_name gets its own sweep directory, and a trial
directory is run only by the study, trial and parameters it records (in-process, fast)."""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra.core.utils import setup_globals
from omegaconf import OmegaConf

from litforge.errors import ConfigError
from litforge.sweeps import location, trial_dirs
from litforge.sweeps.trial_dirs import RECORD_NAME, Owner

APP = Path(__file__).with_name("plain_app")
ENV = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
setup_globals()  # Hydra's `now` resolver, as in a sweep
# lightning-hydra-template's configs/hydra/default.yaml: a sweep directory named after the time
LHT_SWEEP_DIR = "${paths.log_dir}/${task_name}/multiruns/${now:%Y-%m-%d}_${now:%H-%M-%S}"


def lht_config(tmp_path, study_name):
    """The composed config of `train.py -m hparams_search=mnist_optuna` in an LHT project."""
    return OmegaConf.create(
        {
            "task_name": "train",
            "paths": {"log_dir": str(tmp_path / "logs")},
            "hydra": {
                "sweep": {"dir": LHT_SWEEP_DIR, "subdir": "${hydra.job.num}"},
                "job": {"name": "train"},
                "runtime": {"choices": {"hparams_search": "mnist_optuna"}},
                "sweeper": {"study_name": study_name, "storage": None},
            },
        }
    )


def stable_dir(tmp_path, study_name):
    config = lht_config(tmp_path, study_name)
    name = study_name or "train"  # litforge.sweeps.study.study_name_of: null is the job name
    return location.stable_sweep_dir(config, config.hydra.sweeper, name)


def test_a_new_study_name_gets_a_sweep_directory_of_its_own(tmp_path):
    base = tmp_path / "logs" / "train" / "multiruns"
    assert stable_dir(tmp_path, "lr_search") == base / "lr_search"
    assert stable_dir(tmp_path, "lr_search_v2") == base / "lr_search_v2"
    # An unnamed study (LHT's `study_name: null`) is named by its hparams_search option, as
    # before: the same command still finds the directory of its earlier run.
    assert stable_dir(tmp_path, None) == base / "mnist_optuna"
    assert stable_dir(tmp_path, "train") == base / "mnist_optuna"  # the job's name: unnamed


def test_the_same_trial_finds_its_directory_again(tmp_path):
    owner = Owner("lr_search", 0, {"model.optimizer.lr": 0.001, "data.batch_size": 64})
    first = trial_dirs.claim(tmp_path, owner)
    assert first == tmp_path / "0"
    (first / "checkpoints").mkdir()  # its run
    assert trial_dirs.claim(tmp_path, owner) == first  # a retry, or the same command again
    record = json.loads((first / RECORD_NAME).read_text())
    assert record == {"study": "lr_search", "trial": 0, "params": owner.params}


def test_another_study_never_runs_in_a_trial_directory_of_the_first(tmp_path, caplog):
    """A hydra.sweep.dir that two studies share: the second's trial 0 gets its own."""
    first = Owner("lr_search", 0, {"model.optimizer.lr": 0.001})
    taken = trial_dirs.claim(tmp_path, first)
    (taken / "metrics.json").write_text('{"val/acc": 0.5986}')
    second = Owner("lr_search_v2", 0, {"model.optimizer.lr": 0.03})
    with caplog.at_level(logging.WARNING, logger="litforge"):
        own = trial_dirs.claim(tmp_path, second)
    assert own == tmp_path / "lr_search_v2-0" and own != taken
    assert sorted(p.name for p in own.iterdir()) == [RECORD_NAME]
    assert (taken / "metrics.json").read_text() == '{"val/acc": 0.5986}'  # untouched
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "holds trial 0 of study lr_search" in said[0], said
    assert trial_dirs.claim(tmp_path, second) == own  # its retry continues its own run
    assert trial_dirs.claim(tmp_path, first) == taken


def test_the_same_number_with_other_parameters_never_continues_the_run(tmp_path):
    """A study started over on a new journal numbers its trials from 0 again."""
    before = trial_dirs.claim(tmp_path, Owner("s", 0, {"lr": 0.001}))
    again = trial_dirs.claim(tmp_path, Owner("s", 0, {"lr": 0.3}))
    third = trial_dirs.claim(tmp_path, Owner("s", 0, {"lr": 0.02}))
    assert [before.name, again.name, third.name] == ["0", "s-0", "s-0-2"]


@pytest.mark.parametrize(
    "damage",
    ["no record", "garbage", "a list", "other keys", "a directory", "a fifo", "huge", "a file"],
)
def test_a_directory_without_a_readable_record_is_never_taken_over(tmp_path, damage):
    """Whatever lies in the sweep directory is data to check: no hang, no traceback."""
    other = tmp_path / "3"
    if damage == "a file":
        other.write_text("not a directory")
    else:
        other.mkdir()
        (other / "last.ckpt").write_bytes(b"someone's checkpoint")
    record = other / RECORD_NAME
    if damage == "garbage":
        record.write_bytes(b"\xff\x00{")
    elif damage == "a list":
        record.write_text("[1, 2]")
    elif damage == "other keys":
        record.write_text('{"study": "s", "trial": 3, "params": {}, "extra": 1}')
    elif damage == "a directory":
        record.mkdir()
    elif damage == "a fifo":
        os.mkfifo(record)
    elif damage == "huge":
        record.write_text(" " * (trial_dirs.MAX_RECORD_BYTES + 1))
    assert trial_dirs.claim(tmp_path, Owner("s", 3, {})) == tmp_path / "s-3"


def test_a_sweep_directory_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "a file").write_text("hydra.sweep.dir names a path below a file")
    with pytest.raises(ConfigError, match="cannot write .*litforge-trial.json for trial 0"):
        trial_dirs.claim(tmp_path / "a file" / "sweep", Owner("s", 0, {}))


def test_two_studies_in_one_given_sweep_directory_keep_their_trials_apart(tmp_path):
    """A hydra.sweep.dir of the user's, reused by a second study (plain Hydra app, LHT's
    config): each trial of the second runs in a directory of its own, and each study's
    trials.csv and best.yaml hold its own trials."""
    sweep_dir = tmp_path / "sweep"
    for name in ("first", "second"):
        done = subprocess.run(
            [sys.executable, "app.py", f"hydra.sweep.dir={sweep_dir}", "hydra.sweeper.n_trials=2",
             f"hydra.sweeper.study_name={name}"],
            cwd=APP, env=ENV, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        with (sweep_dir / "trials.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert [r["run_dir"] for r in rows] == [
            str(sweep_dir / ("0" if name == "first" else f"{name}-0")),
            str(sweep_dir / ("1" if name == "first" else f"{name}-1")),
        ], done.stderr[-3000:]
        for row in rows:
            record = json.loads((Path(row["run_dir"]) / RECORD_NAME).read_text())
            assert record["study"] == name and str(record["params"]["x"]) == row["x"]
        best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
        assert best["run_dir"] in [r["run_dir"] for r in rows]
    said = [line for line in done.stdout.splitlines() if "a trial never continues" in line]
    assert len(said) == 2 and "holds trial 0 of study first" in said[0], done.stderr[-3000:]
