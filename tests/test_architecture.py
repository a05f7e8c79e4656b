"""A capability is a module plus a config file: delete both and the template still works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from litforge import build
from litforge.train import train
from tests.helpers import ROOT

BARE = ["checkpoint=none", "callbacks=none", "logger=none", "debug=fdr", "trainer=cpu"]


def test_bare_run_attaches_no_litforge_callback_but_the_model_record(make_cfg):
    cfg = make_cfg(*BARE)
    trainer = build.build_trainer(cfg)
    ours = [type(c).__qualname__ for c in trainer.callbacks if "litforge" in type(c).__module__]
    # Not a capability: whatever writes a checkpoint (a user's ModelCheckpoint too) must
    # write one that loads with weights_only=True.
    assert ours == ["ModelRecord"]
    assert trainer.loggers == []
    metrics = train(cfg)
    assert metrics["best_checkpoint"] is None  # nothing saved: the weights in memory tested
    assert 0.0 <= metrics["test/acc"] <= 1.0


def test_default_run_gets_every_callback_from_config(make_cfg):
    trainer = build.build_trainer(make_cfg("trainer=cpu"))
    names = {type(c).__name__ for c in trainer.callbacks}
    # conf/callbacks/default.yaml's three, and the one conf/logger/csv.yaml brings along.
    assert {"LearningRateMonitor", "EpochLog", "CsvLogPosition"} <= names


def test_deleting_callbacks_and_loggers_leaves_a_working_template(tmp_path):
    copy = tmp_path / "litforge"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for part in ("src", "conf"):
        shutil.copytree(ROOT / part, copy / part, ignore=ignore)
    shutil.copy(ROOT / "train.py", copy / "train.py")
    deleted = [
        "src/litforge/callbacks",
        "src/litforge/loggers",
        "conf/callbacks/default.yaml",
        "conf/callbacks/lr_monitor.yaml",
        "conf/callbacks/epoch_log.yaml",
        "conf/callbacks/progress_bar.yaml",
        "conf/logger/csv.yaml",
    ]
    for path in deleted:
        target = copy / path
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "CI": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "train.py", *BARE, f"hydra.run.dir={run_dir}"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["global_step"] == 1
    # The run used the copy (its conf/ and package), not the installed checkout.
    where = subprocess.run(
        [sys.executable, "-c", "import litforge.cli as c; print(c.CONF_DIR)"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()) == copy / "conf"
