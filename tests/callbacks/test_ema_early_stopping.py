"""callbacks.ema (Lightning's EMAWeightAveraging) and callbacks.early_stopping (Lightning's
EarlyStopping) as options: checkpoints, exact resume, eval, sweeps' value, bad input."""

from __future__ import annotations

import pytest
import torch

from litforge.callbacks.early_stopping import EarlyStop
from litforge.callbacks.ema import EMA
from litforge.errors import ConfigError
from litforge.evaluation import evaluate
from litforge.training import train
from tests.checkpointing.test_resume_exact import assert_bitwise_equal, final_checkpoint
from tests.helpers import TINY_GPT, run_entry

EMA_RUN = ["callbacks=[default,ema]", "callbacks.ema.decay=0.9", "trainer.max_steps=10",
           "checkpoint.every_n_train_steps=5", "trainer.limit_val_batches=2",
           "trainer.deterministic=true", "test=false"]  # fmt: skip


# Slow for CI time (three train.py processes): make test keeps the average in the checkpoint
# and eval.py using it (test_eval_uses_the_average), and a kill -9 resumed bitwise
# (tests/checkpointing/test_resume_exact.py's GPT case).
@pytest.mark.slow
def test_ema_checkpoints_hold_the_average_and_resume_exactly(tmp_path):
    reference = run_entry("train.py", *EMA_RUN, run_dir=tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr[-3000:]
    killer = ["+callbacks.kill._target_=tests.helpers.KillAtStep", "+callbacks.kill.step=7"]
    killed = run_entry("train.py", *EMA_RUN, *killer, run_dir=tmp_path / "resumed")
    assert killed.returncode == -9
    resumed = run_entry("train.py", *EMA_RUN, run_dir=tmp_path / "resumed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected = final_checkpoint(tmp_path / "reference", 10)
    got = final_checkpoint(tmp_path / "resumed", 10)
    for key in ("state_dict", "current_model_state", "averaging_state", "optimizer_states"):
        assert_bitwise_equal(expected[key], got[key], key)
    # The average is not the trained weights.
    trained, average = expected["current_model_state"], expected["state_dict"]
    assert any(not torch.equal(trained[k], average[k]) for k in average)


def test_eval_uses_the_average(make_cfg, tmp_path):
    metrics = train(make_cfg("trainer=cpu", *EMA_RUN, run_dir=tmp_path / "train"))
    ckpt = tmp_path / "train" / "checkpoints" / "step-00000010.ckpt"
    checkpoint = torch.load(ckpt, weights_only=True)
    evaluated = evaluate(make_cfg("trainer=cpu", f"ckpt_path={ckpt}", config_name="eval",
                                  run_dir=tmp_path / "eval"))  # fmt: skip
    # eval.py tests state_dict, the average; the fit's last validation ran on it too.
    assert evaluated["test/loss"] > 0 and "val/loss" in metrics
    assert "current_model_state" in checkpoint


@pytest.mark.parametrize("decay", [0, 1, 1.5, -0.1, "x"])
def test_a_decay_outside_0_1_is_one_line(decay):
    with pytest.raises(ConfigError, match=r"^callbacks\.ema\.decay=.* must be in \(0, 1\)"):
        EMA(decay=decay)


def test_ema_with_fsdp_is_one_line_before_training(tmp_path):
    # A subprocess: an FSDP process group in the test process would hold its port.
    result = run_entry("train.py", *TINY_GPT, "trainer=fsdp", "trainer.devices=1",
                       "callbacks=[default,ema]", "trainer.max_steps=2", run_dir=tmp_path / "run")  # fmt: skip
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: callbacks.ema with a sharded strategy (trainer=fsdp)")


def test_the_memory_budget_counts_the_average(make_cfg, caplog):
    import logging

    with caplog.at_level(logging.INFO, "litforge"):
        train(make_cfg("trainer=cpu", "trainer.max_steps=1", "test=false"))
        plain = [
            r.getMessage() for r in caplog.records if "memory budget: precision" in r.getMessage()
        ]
        caplog.clear()
        train(
            make_cfg("trainer=cpu", "trainer.max_steps=1", "test=false", "callbacks=[default,ema]")
        )
        averaged = [
            r.getMessage() for r in caplog.records if "memory budget: precision" in r.getMessage()
        ]
    units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    weights = []
    for line in (plain[0], averaged[0]):
        value, unit = line.split(" weights=")[1].split()[:2]
        weights.append(float(value) * units[unit])
    assert weights[1] == pytest.approx(2 * weights[0], rel=0.05)  # as printed, 1 decimal


STOPPING = ["trainer=cpu", "callbacks=[default,early_stopping]", "callbacks.early_stopping.patience=2",
            "trainer.max_epochs=30", "test=false", "model.optimizer.lr=0.5"]  # fmt: skip


def test_early_stopping_stops_and_reports_the_best_value(make_cfg, tmp_path):
    cfg = make_cfg(*STOPPING, "optimized_metric=val/acc", "optimized_mode=max")
    metrics = train(cfg)
    assert metrics["epoch"] < 29  # stopped before max_epochs
    checkpoint = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("*.ckpt"))[-1],
                            weights_only=True)  # fmt: skip
    (state,) = [v for k, v in checkpoint["callbacks"].items() if k.startswith("EarlyStop")]
    assert state["wait_count"] == 2 and metrics["val/acc"] == pytest.approx(
        float(state["best_score"])
    )


def test_patience_survives_a_resume(make_cfg, tmp_path):
    first = train(make_cfg(*STOPPING, "trainer.max_epochs=3", "run_name=es"))
    path = sorted((tmp_path / "run" / "checkpoints").glob("*.ckpt"))[-1]
    state = next(v for k, v in torch.load(path, weights_only=True)["callbacks"].items()
                 if k.startswith("EarlyStop"))  # fmt: skip
    resumed = train(make_cfg(*STOPPING, "trainer.max_epochs=4", "run_name=es"))
    assert resumed["epoch"] >= first["epoch"]
    path = sorted((tmp_path / "run" / "checkpoints").glob("*.ckpt"))[-1]
    after = next(v for k, v in torch.load(path, weights_only=True)["callbacks"].items()
                 if k.startswith("EarlyStop"))  # fmt: skip
    # Counting went on from the checkpoint: one more validation either improved (0) or
    # added one to the count; a reset would also have lost the best value.
    assert after["wait_count"] in (0, state["wait_count"] + 1)
    assert float(after["best_score"]) <= float(state["best_score"])


def test_a_metric_never_logged_is_one_line_at_the_first_validation(make_cfg):
    cfg = make_cfg(*STOPPING, "callbacks.early_stopping.monitor=val/f1")
    with pytest.raises(ConfigError) as err:
        train(cfg)
    message = str(err.value)
    assert message.startswith("callbacks.early_stopping.monitor=val/f1 is not logged at validation")
    assert "val/loss" in message and "\n" not in message


def test_bad_patience():
    with pytest.raises(ConfigError, match=r"patience=0 must be an integer >= 1"):
        EarlyStop(monitor="val/loss", patience=0)
