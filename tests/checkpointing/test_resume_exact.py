"""SIGKILL between two checkpoints, rerun the same command: bitwise the uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import TINY_GPT, run_entry

CNN = [
    "trainer.max_steps=30",
    "checkpoint.every_n_train_steps=5",
    "trainer.limit_val_batches=2",
    "trainer.deterministic=true",
    "test=false",
]
GPT = [
    *TINY_GPT,
    "model.gradient_checkpointing=true",
    "trainer.accumulate_grad_batches=2",
    "trainer.limit_train_batches=10",  # 5 optimizer steps an epoch: resume crosses epochs
    "trainer.val_check_interval=null",
    "trainer.check_val_every_n_epoch=1",
    "trainer.limit_val_batches=2",
    "trainer.max_steps=14",
    "checkpoint.every_n_train_steps=4",
    "trainer.deterministic=true",
    "test=false",
]


def final_checkpoint(run_dir: Path, step: int) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step-{step:08d}.ckpt", weights_only=True)


def assert_bitwise_equal(a, b, path: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_bitwise_equal(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_bitwise_equal(x, y, f"{path}/{i}")


def killed_and_resumed_equals_uninterrupted(
    tmp_path: Path, args: list[str], kill_at: int, last: int
):
    reference = run_entry("train.py", *args, run_dir=tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr[-3000:]

    killer = [
        "+callbacks.kill._target_=tests.helpers.KillAtStep",
        f"+callbacks.kill.step={kill_at}",
    ]
    killed = run_entry("train.py", *args, *killer, run_dir=tmp_path / "preempted")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (tmp_path / "preempted" / "checkpoints" / f"step-{last:08d}.ckpt").exists()

    resumed = run_entry("train.py", *args, run_dir=tmp_path / "preempted")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stdout
    expected = final_checkpoint(tmp_path / "reference", last)
    got = final_checkpoint(tmp_path / "preempted", last)
    assert_bitwise_equal(expected["state_dict"], got["state_dict"], "state_dict")
    assert_bitwise_equal(expected["optimizer_states"], got["optimizer_states"], "optimizer")
    assert_bitwise_equal(expected["lr_schedulers"], got["lr_schedulers"], "lr_schedulers")


def test_cnn_with_dropout_resumes_mid_epoch_bitwise(tmp_path):
    # 19 batches an epoch: killed at step 23, resumed from the step-20 checkpoint mid-epoch.
    killed_and_resumed_equals_uninterrupted(tmp_path, CNN, kill_at=23, last=30)


def test_gpt_with_checkpointing_and_accumulation_resumes_bitwise(tmp_path):
    killed_and_resumed_equals_uninterrupted(tmp_path, GPT, kill_at=10, last=14)


@pytest.mark.slow
def test_ddp_two_processes_resume_bitwise(tmp_path):
    # 10 batches per rank per epoch: the kill at step 13 lands mid-epoch after step 10.
    killed_and_resumed_equals_uninterrupted(
        tmp_path, [*CNN, "trainer.devices=2"], kill_at=13, last=30
    )
