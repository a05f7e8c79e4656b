"""A monitored metric that never appears stops the run; so does a run that cannot log it."""

from __future__ import annotations

import pytest

from litforge.errors import ConfigError
from litforge.train import train


def test_a_misspelled_metric_fails_after_the_first_validation_naming_the_logged_ones(
    make_cfg, tmp_path
):
    """Issue 9.6: `optimized_metric=val/accuracy` ran to the end and tested the last weights."""
    cfg = make_cfg("debug=limit", "optimized_metric=val/accuracy", "optimized_mode=max")
    with pytest.raises(ConfigError) as err:
        train(cfg)
    message = str(err.value)
    assert "checkpoint.monitor=val/accuracy" in message
    assert "val/acc" in message and "val/loss" in message
    assert not (tmp_path / "run" / "metrics.json").exists()


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
