"""litforge's own models with an optimizer and schedule from torch, as a user configures
them: `_target_` + `_partial_` on the command line, a per-epoch scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from litforge.training import train

SGD_STEPLR = [
    "experiment=digits_cnn", "debug=limit", "test=false", "trainer.max_epochs=3",
    "model.optimizer._target_=torch.optim.SGD", "~model.optimizer.betas", "~model.optimizer.eps",
    "+model.optimizer.momentum=0.9", "model.optimizer.lr=0.1",
    "model.scheduler._target_=torch.optim.lr_scheduler.StepLR", "~model.scheduler.warmup_steps",
    "~model.scheduler.min_lr_ratio", "+model.scheduler.step_size=1", "+model.scheduler.gamma=0.5",
    "model.scheduler_interval=epoch",
]  # fmt: skip


def test_sgd_and_a_per_epoch_steplr_drive_the_classifier(make_cfg, tmp_path):
    metrics = train(make_cfg(*SGD_STEPLR))
    newest = sorted(Path(tmp_path / "run" / "checkpoints").glob("step-*.ckpt"))[-1]
    saved = torch.load(newest, weights_only=True)
    assert metrics["global_step"] == 9
    assert saved["lr_schedulers"][0]["last_epoch"] == 3  # stepped once an epoch, not a step
    assert saved["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.1 / 8)
    assert saved["optimizer_states"][0]["param_groups"][0]["momentum"] == 0.9
