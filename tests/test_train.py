"""In-process training runs: every model x precision, every option, the run directory."""

from __future__ import annotations

import csv
import json
import logging
import math
import warnings
from pathlib import Path

import pytest
import torch

from litforge.training import train
from tests.helpers import TINY_GPT

PRECISIONS = ["32", "16-mixed", "bf16-mixed", "bf16-true", "16-true"]
MODELS = {"cnn": [], "gpt": TINY_GPT}


def read_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("model", list(MODELS))
def test_fast_dev_run_every_model_and_precision(make_cfg, tmp_path, model, precision):
    cfg = make_cfg(*MODELS[model], f"precision={precision}", "debug=fdr", "trainer=cpu")
    metrics = train(cfg)
    assert math.isfinite(metrics["test/loss"]), metrics
    saved = read_metrics(tmp_path / "run")
    assert saved["precision_requested"] == precision
    expected = {"32": "32-true", "16-mixed": "bf16-mixed"}.get(precision, precision)
    assert saved["precision_effective"] == expected


def test_16_mixed_on_cpu_is_one_clear_warning(make_cfg, caplog):
    cfg = make_cfg("precision=16-mixed", "debug=fdr", "trainer=cpu")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        train(cfg)
    ours = [r.getMessage() for r in caplog.records if "requested 16-mixed" in r.getMessage()]
    assert ours == [
        "precision: requested 16-mixed, effective bf16-mixed (float16 autocast is not "
        "supported on CPU, so Lightning runs bfloat16 autocast)"
    ]
    assert not [w for w in caught if "AMP with fp16 is not supported" in str(w.message)]


OPTION_RUNS = {
    "debug=overfit": ["debug=overfit", "trainer.max_epochs=3"],
    "debug=limit": ["debug=limit"],
    "debug=profiler": ["debug=profiler", "trainer.limit_train_batches=3"],
    "trainer=cpu": ["trainer=cpu", "debug=limit"],
    "trainer=default": ["trainer=default", "debug=limit"],
    "callbacks=none": ["callbacks=none", "debug=limit"],
    "logger=none": ["logger=none", "debug=limit"],
    "checkpoint=none": ["checkpoint=none", "debug=limit"],
    "experiment=digits_cnn": ["experiment=digits_cnn", "debug=limit"],
    "experiment=gpt_char": [*TINY_GPT, "debug=limit"],
    "gradient_checkpointing": [*TINY_GPT, "model.gradient_checkpointing=true", "debug=limit"],
}


@pytest.mark.parametrize("name", list(OPTION_RUNS))
def test_each_option_trains_and_tests(make_cfg, tmp_path, name):
    metrics = train(make_cfg(*OPTION_RUNS[name]))
    assert math.isfinite(metrics["test/loss"])
    assert (tmp_path / "run" / "metrics.json").is_file()
    if name == "debug=profiler":
        assert "Total" in (tmp_path / "run" / "fit-profile.txt").read_text()
    if name == "checkpoint=none":
        assert not (tmp_path / "run" / "checkpoints").exists()
        assert metrics["best_checkpoint"] is None


def test_run_directory_holds_everything_the_readme_lists(make_cfg, tmp_path):
    run_dir = tmp_path / "run"
    train(make_cfg("debug=limit", "trainer.accumulate_grad_batches=2"))
    assert "${" not in (run_dir / "config.yaml").read_text()
    record = json.loads((run_dir / "run.json").read_text())
    assert {"command", "git_commit", "git_dirty", "started"} <= set(record)
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    assert any(row.get("train/loss_step") for row in rows)
    assert any(row.get("val/acc") for row in rows)
    assert (
        run_dir / "checkpoints" / "step-00000004.ckpt.complete"
    ).is_file()  # 2 epochs x 2 steps (3 batches, accumulate 2)
    metrics = read_metrics(run_dir)
    for key in ("val/acc", "val/loss", "test/acc", "test/loss", "train/loss_epoch"):
        assert isinstance(metrics[key], float), key
    assert metrics["precision_requested"] == "32"
    assert metrics["precision_effective"] == "32-true"
    assert metrics["effective_batch_size"] == 64 * 2
    assert "effective_batch_size: 128" in (run_dir / "csv" / "hparams.yaml").read_text()
    best = Path(metrics["best_checkpoint"])
    assert best.parent == run_dir / "checkpoints" and best.is_file()
    checkpoint = torch.load(best, weights_only=True)  # no pickled nets or partials
    record = checkpoint["litforge_model"]  # the model's config: what eval.py compares
    assert record["_target_"] == "litforge_examples.models.classifier.Classifier"
    assert record["net"]["_target_"] == "litforge_examples.nets.cnn.CNN"
    assert checkpoint["hyper_parameters"]["optimizer"]["_target_"] == "litforge.optim.adamw"


def test_same_seed_same_run_other_seed_other_run(make_cfg, tmp_path):
    def final_loss(seed: int, name: str) -> float:
        cfg = make_cfg(
            "debug=limit", f"seed={seed}", "trainer.deterministic=true", run_dir=tmp_path / name
        )
        return train(cfg)["val/loss"]

    first = final_loss(3, "a")
    assert final_loss(3, "b") == first
    assert final_loss(4, "c") != first
