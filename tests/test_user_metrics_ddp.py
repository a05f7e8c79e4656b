"""A user's module whose training_step calls a torchmetrics metric's compute(), which
gathers from every rank under DDP, trains with DDP and every default callback on."""

from __future__ import annotations

import json

from tests.helpers import ROOT, run_entry

USER = [f"hydra.searchpath=[file://{ROOT}/tests/user_project/conf]", "model=lht_mlp",
        "data=lht_digits", "trainer=cpu", "trainer.limit_val_batches=2", "test=false",
        "model._target_=tests.user_project.metric_in_step.ComputesInStep"]  # fmt: skip


def test_a_metric_computed_in_training_step_trains_with_ddp(tmp_path):
    """The memory budget runs the step on rank 0 alone while the other ranks wait for its
    answer: a compute() there used to wait for them until the collective timeout."""
    run_dir = tmp_path / "run"
    result = run_entry("train.py", *USER, "trainer.devices=2", "trainer.max_steps=3",
                       "processes.collective_timeout_s=30", run_dir=run_dir, timeout=240)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "memory budget for ComputesInStep" in result.stdout + result.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["global_step"] == 3 and metrics["train/rms"] > 0
