"""FinalValidation: a run that ends between two validations still ends on one, in fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from litforge.training import train
from tests.helpers import TINY_GPT

RECORD = ["+callbacks.record._target_=tests.helpers.RecordValidations"]
GPT = [*TINY_GPT, *RECORD, "trainer.val_check_interval=5", "trainer.limit_val_batches=2"]
CNN = [*RECORD, "debug=limit", "test=false"]  # 3 batches an epoch, validation every epoch


def validated_at(run_dir: Path) -> list[int]:
    return [int(line) for line in (run_dir / "validations.txt").read_text().split()]


def test_max_steps_between_validations_ends_on_one(make_cfg, tmp_path):
    """The issue's case: val_check_interval=5, max_steps=7 used to end with no val/loss in
    metrics.json and no ranked checkpoint."""
    metrics = train(make_cfg(*GPT, "trainer.max_steps=7", "trainer.limit_test_batches=2"))
    run_dir = tmp_path / "run"
    assert validated_at(run_dir) == [5, 7]
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved["global_step"] == 7
    assert "val/loss" in saved and metrics["val/loss"] == saved["val/loss"]
    assert saved["best_checkpoint"] is not None
    assert (run_dir / "checkpoints" / "step-00000007.ckpt.complete").is_file()


def test_max_steps_on_a_validation_gets_no_second_one(make_cfg, tmp_path):
    train(make_cfg(*GPT, "trainer.max_steps=10", "test=false"))
    assert validated_at(tmp_path / "run") == [5, 10]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # Epochs 1 and 3 validate (every 2nd); epoch 3's last batch ends fit: no extra one.
        pytest.param(["trainer.max_epochs=4"], [6, 12], id="last-epoch-validates"),
        # Epoch 3 (steps 7-9) is skipped by check_val_every_n_epoch=2 but ends fit.
        pytest.param(["trainer.max_epochs=3"], [6, 9], id="last-epoch-skipped"),
        # max_steps=8 lands mid-epoch in a skipped epoch.
        pytest.param(["trainer.max_epochs=3", "trainer.max_steps=8"], [6, 8], id="mid-epoch"),
    ],
)
def test_epoch_schedule_ends_on_a_validation(make_cfg, tmp_path, overrides, expected):
    train(make_cfg(*CNN, "trainer.check_val_every_n_epoch=2", *overrides))
    assert validated_at(tmp_path / "run") == expected


@pytest.mark.parametrize(
    "minimum", ["trainer.min_epochs=10", "trainer.min_steps=50"], ids=["min_epochs", "min_steps"]
)
def test_max_steps_before_the_minimum_still_ends_on_a_validation(make_cfg, tmp_path, minimum):
    """An experiment written for long runs (min_epochs: 10, as lightning-hydra-template's
    example has) cut short with max_steps: Lightning ignores a stop request before the
    minimum, so the run used to end with no val/ metrics and no ranked checkpoint."""
    metrics = train(make_cfg(*CNN, minimum, "trainer.max_steps=2"))
    assert validated_at(tmp_path / "run") == [2]
    assert "val/loss" in metrics and metrics["best_checkpoint"] is not None


def test_a_run_resumed_mid_epoch_still_ends_on_a_validation(make_cfg, tmp_path):
    # Lightning calls no on_train_epoch_start for the epoch a run resumes in.
    first = [*GPT, "test=false", "checkpoint.every_n_train_steps=3", "run_name=mid"]
    train(make_cfg(*first, "trainer.max_steps=3"))
    metrics = train(make_cfg(*first, "trainer.max_steps=7"))
    assert metrics["global_step"] == 7 and "val/loss" in metrics
    assert validated_at(tmp_path / "run")[-1] == 7
