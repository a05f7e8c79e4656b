"""train.py and eval.py as a user runs them: real processes, real DDP, real exit codes."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_entry

# CI time: test_bad_input refuses the same values in-process; one case stays a process.
SLOW = pytest.mark.slow


def test_default_experiment_reaches_97_percent(tmp_path):
    result = run_entry("train.py", run_dir=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["val/acc"] >= 0.97, metrics
    assert f"run directory: {tmp_path}" in result.stdout


@pytest.mark.parametrize(
    ("devices", "precision"),
    [("2", "32"), pytest.param("4", "bf16-mixed", marks=pytest.mark.slow)],
)
def test_ddp_on_cpu_writes_one_run_directory_and_logs_once(tmp_path, devices, precision):
    # The users' own command, shortened by debug=limit; Lightning re-executes sys.argv for
    # each extra rank, which is why this can only run in a subprocess.
    # logger=many: CSV, TensorBoard and W&B (offline: no key in this environment).
    result = run_entry(
        "train.py", f"precision={precision}", f"trainer.devices={devices}", "debug=limit",
        "processes.oversubscribe=true", "logger=many", run_dir=tmp_path / "run",
        env={"WANDB_API_KEY": "", "NETRC": str(tmp_path / "no-netrc")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # One tracked run, rank 0's: one W&B run, TensorBoard event files of one process.
    assert len(list((tmp_path / "run" / "wandb").glob("offline-run-*"))) == 1
    events = (tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*")
    assert len({p.name.split(".")[-2] for p in events}) == 1  # ...<host>.<pid>.<n>
    assert result.stdout.count("finished:") == 1
    assert result.stdout.count("effective batch size") == 1
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["effective_batch_size"] == 64 * int(devices)
    assert metrics["precision_effective"] == ("32-true" if precision == "32" else precision)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no per-rank directories
    assert (tmp_path / "run" / "checkpoints" / "step-00000006.ckpt.complete").is_file()


# CI time: train.py then eval.py as processes stay in make test in litforge_examples/test_smoke.
@pytest.mark.slow
def test_train_then_eval_round_trip(tmp_path):
    train = run_entry("train.py", "debug=limit", "precision=32", run_dir=tmp_path / "train")
    assert train.returncode == 0, train.stderr[-3000:]
    trained = json.loads((tmp_path / "train" / "metrics.json").read_text())
    result = run_entry(
        "eval.py", f"ckpt_path={trained['best_checkpoint']}", "debug=limit",
        run_dir=tmp_path / "eval",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    evaluated = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert evaluated["test/acc"] == trained["test/acc"]
    # Upstream lines that say nothing about the run are silenced (litforge.cli).
    noise = ("💡 Tip:", "'set_vital' is deprecated", "`weights_only` was not set")
    for run in (train, result):
        assert not [line for line in noise if line in run.stdout + run.stderr]
        # Piped output: no box-drawn model summary or test table, plain lines instead.
        assert not set("┃━┏┡│└┌") & set(run.stdout + run.stderr)
    assert "Trainable params" in train.stdout + train.stderr  # the plain-text summary


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["trainer.devices=0"],
            "error: trainer.devices=0 is invalid; must be an integer >= 1",
            marks=SLOW,
        ),
        pytest.param(
            ["trainer.accumulate_grad_batches=0"],
            "error: trainer.accumulate_grad_batches=0",
            marks=SLOW,
        ),
        pytest.param(
            ["model.optimizer.lr=-0.1"], "error: model.optimizer.lr=-0.1 must be > 0", marks=SLOW
        ),
        (["data.batch_size=-8"], "error: data.batch_size=-8 must be >= 1"),
        pytest.param(["model=gpt"], "model=gpt reads block_size from data=text", marks=SLOW),
    ],
)
def test_bad_values_fail_before_training_with_one_line(tmp_path, args, message):
    result = run_entry("train.py", *args, run_dir=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "checkpoints").exists()


def test_full_traceback_on_request(tmp_path):
    result = run_entry(
        "train.py", "trainer.devices=0", run_dir=tmp_path, env={"HYDRA_FULL_ERROR": "1"}
    )
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ConfigError" in result.stderr


# Slow for CI time; make test covers it by eval.py's ckpt_path refusals in-process: test_bad_input.
@pytest.mark.slow
def test_eval_without_checkpoint_names_the_key(tmp_path):
    result = run_entry("eval.py", run_dir=tmp_path)
    assert result.returncode != 0
    assert "ckpt_path" in result.stderr
    missing = run_entry("eval.py", "ckpt_path=/nonexistent/x.ckpt", run_dir=tmp_path)
    assert missing.returncode == 2
    assert "error: ckpt_path=/nonexistent/x.ckpt: no such file" in missing.stderr


@pytest.mark.slow
def test_gpt_char_experiment_learns_text(tmp_path):
    result = run_entry("train.py", "experiment=gpt_char", run_dir=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["val/loss"] < 1.8, metrics
