"""A monitored metric that never appears stops the run; so does a run that cannot log it."""

from __future__ import annotations

import pytest

from litforge.errors import ConfigError
from litforge.training import train


@pytest.mark.parametrize(("sanity", "which"), [(2, "sanity"), (0, "first")])
def test_a_misspelled_metric_fails_before_training_naming_the_logged_ones(
    make_cfg, tmp_path, sanity, which
):
    """`optimized_metric=val/accuracy` once ran to the end and tested the last weights; it
    is caught at the sanity validation, before any step (without one, at the first)."""
    cfg = make_cfg("debug=limit", "optimized_metric=val/accuracy", "optimized_mode=max",
                   f"trainer.num_sanity_val_steps={sanity}")  # fmt: skip
    with pytest.raises(ConfigError) as err:
        train(cfg)
    message = str(err.value)
    assert (
        f"checkpoint.monitor=val/accuracy (optimized_metric) was not logged by the {which} "
        in message
    )
    assert "val/acc" in message and "val/loss" in message
    assert not (tmp_path / "run" / "metrics.json").exists()
    if sanity:  # not one training step taken, so nothing saved
        assert not list((tmp_path / "run" / "checkpoints").glob("step-*.ckpt"))


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.limit_val_batches=0", "trainer.limit_val_batches"),
        ("trainer.limit_val_batches=0.0", "trainer.limit_val_batches"),
        ("trainer.max_steps=0", "trainer.max_steps"),
    ],
)
def test_runs_that_cannot_rank_checkpoints_are_refused_before_training(make_cfg, override, key):
    with pytest.raises(ConfigError, match=key):
        train(make_cfg("debug=limit", override))


def test_without_checkpoint_ranking_zero_validation_is_allowed(make_cfg):
    metrics = train(
        make_cfg("debug=limit", "trainer.limit_val_batches=0", "checkpoint.monitor=null")
    )
    assert metrics["global_step"] == 6 and metrics["best_checkpoint"] is None
