"""A resume with other optimizer or schedule settings than its checkpoint's: applied to
the restored optimizer and schedule from the resumed step, with one line, or refused."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch

from litforge.errors import ConfigError
from litforge.training import train
from tests.test_user_code import USER

BASE = ["trainer=cpu", "test=false", "checkpoint.every_n_train_steps=5", "model.net.dropout=0",
        "trainer.val_check_interval=5", "checkpoint.keep_last=10"]  # fmt: skip


def saved(run_dir: Path, step: int) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step-{step:08d}.ckpt", weights_only=True)


def test_a_new_learning_rate_and_weight_decay_apply_from_the_resumed_step(
    make_cfg, tmp_path, caplog
):
    run_dir = tmp_path / "run"
    train(make_cfg(*BASE, "trainer.max_steps=10", run_dir=run_dir))  # lr 3e-3, decay 1e-4
    step10 = tmp_path / "step-10.ckpt"
    shutil.copy(run_dir / "checkpoints" / "step-00000010.ckpt", step10)
    with caplog.at_level(logging.INFO, logger="litforge"):
        train(make_cfg(*BASE, "trainer.max_steps=14", "model.optimizer.lr=5e-4",
                       "model.optimizer.weight_decay=0.01", run_dir=run_dir))  # fmt: skip
    assert (
        "model.optimizer.lr 0.003 -> 0.0005 from step 10; "
        "model.optimizer.weight_decay 0.0001 -> 0.01 from step 10"
    ) in caplog.text
    # The same four steps with the checkpoint's own settings, for the schedule's factor.
    train(make_cfg(*BASE, "trainer.max_steps=14", f"ckpt_path={step10}", run_dir=tmp_path / "same"))
    changed, kept = saved(run_dir, 14), saved(tmp_path / "same", 14)
    groups = changed["optimizer_states"][0]["param_groups"]
    for new, old in zip(groups, kept["optimizer_states"][0]["param_groups"], strict=True):
        assert (new["initial_lr"], old["initial_lr"]) == (5e-4, 3e-3)
        assert new["lr"] == pytest.approx(old["lr"] * 5e-4 / 3e-3, rel=1e-12)
    # litforge.optim.adamw's groups: matrices decay at the new rate, biases stay undecayed.
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]
    assert changed["lr_schedulers"][0]["base_lrs"] == [5e-4, 5e-4]


def test_a_schedule_setting_applies_to_a_restored_step_lr(make_cfg, tmp_path, caplog):
    run_dir = tmp_path / "run"
    train(make_cfg(*USER, "trainer.max_epochs=2", "test=false", run_dir=run_dir))
    with caplog.at_level(logging.INFO, logger="litforge"):
        train(make_cfg(*USER, "trainer.max_epochs=4", "test=false", "model.optimizer.lr=0.2",
                       "model.scheduler.gamma=0.25", run_dir=run_dir))  # fmt: skip
    assert (
        "model.optimizer.lr 0.1 -> 0.2 from step 10; model.scheduler.gamma 0.5 -> 0.25 from step 10"
    ) in caplog.text
    end = saved(run_dir, 20)
    # StepLR halved the lr twice before the resume; it goes on from the new base, by 0.25.
    assert end["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(
        0.2 * 0.5**2 * 0.25**2
    )
    assert end["lr_schedulers"][0]["gamma"] == 0.25
    assert end["lr_schedulers"][0]["base_lrs"] == [0.2]


def test_another_optimizer_class_is_refused_before_training(make_cfg, tmp_path):
    run_dir = tmp_path / "run"
    train(make_cfg(*BASE, "trainer.max_steps=5", run_dir=run_dir))
    with pytest.raises(ConfigError) as err:
        train(make_cfg(*BASE, "trainer.max_steps=10", "model.optimizer._target_=torch.optim.AdamW",
                       run_dir=run_dir))  # fmt: skip
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        "resuming with model.optimizer._target_ litforge.optim.adamw -> torch.optim.AdamW: "
        "cannot be applied to the checkpoint's optimizer and schedule"
    )
    assert "resume with model.optimizer._target_=litforge.optim.adamw" in message
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step-*.ckpt")) == [
        "step-00000005.ckpt"
    ]  # nothing trained after the refusal
