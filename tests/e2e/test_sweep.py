"""`python train.py -m ...`: each job of a sweep is its own run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import ROOT


def test_named_sweep_jobs_do_not_resume_each_other(tmp_path):
    """Issue 9.5: job 1 'resumed' from job 0's final checkpoint and reported its accuracy."""
    store = tmp_path / "ckstore"
    result = subprocess.run(
        [sys.executable, "train.py", "-m", "model.optimizer.lr=1e-3,1e-2", "run_name=sw",
         f"checkpoint.dir={store}", "debug=limit", "test=false",
         f"hydra.sweep.dir={tmp_path / 'multi'}"],
        cwd=ROOT, env={**os.environ, "CI": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from" not in result.stdout
    jobs = sorted(p.name for p in store.iterdir())
    assert jobs == ["sw-0", "sw-1"]
    for job in ("0", "1"):
        metrics = json.loads((tmp_path / "multi" / job / "metrics.json").read_text())
        assert metrics["global_step"] == 6
    assert (store / "sw-1" / "step-00000006.ckpt.complete").is_file()
