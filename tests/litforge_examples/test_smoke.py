"""The recipe end to end as `make train` runs it: train.py trains the default experiment
for one batch and tests it; eval.py evaluates the checkpoint it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the project: train.py, eval.py, conf/


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_train_py_and_eval_py_run_the_default_experiment(tmp_path):
    run = tmp_path / "run"
    trained = _run("train.py", "debug=fdr", "trainer=cpu", f"hydra.run.dir={run}")
    assert trained.returncode == 0, trained.stderr[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["global_step"] == 1 and 0.0 <= metrics["test/acc"] <= 1.0
    (checkpoint,) = (run / "checkpoints").glob("*.ckpt")
    evaluated = _run(
        "eval.py", f"ckpt_path={checkpoint}", "trainer=cpu", f"hydra.run.dir={tmp_path / 'eval'}"
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "test/acc" in json.loads((tmp_path / "eval" / "metrics.json").read_text())
