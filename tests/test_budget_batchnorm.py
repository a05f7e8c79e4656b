"""The memory budget on a user's lightning-hydra-template module: a BatchNorm net (which
refuses one sample in training) is measured at 2 and 4 samples, and a step that fails
outside a Trainer skips the budget in one line while training goes on."""

from __future__ import annotations

import re

import pytest

from litforge import training as train_entry
from litforge.commands import budget
from tests.helpers import ROOT, run_entry
from tests.test_bad_input import run

USER_CONF = ROOT / "tests" / "user_project" / "conf"
DENSE = [f"hydra.searchpath=[file://{USER_CONF}]", "model=lht_dense", "data=lht_digits",
         "trainer=cpu"]  # fmt: skip
SHORT = ["trainer.max_epochs=1", "trainer.limit_train_batches=3", "trainer.limit_val_batches=1",
         "trainer.limit_test_batches=1"]  # fmt: skip
READS_TRAINER = "model._target_=tests.user_project.lit_module.ReadsTrainer"
SKIP = (
    "memory budget: skipped (RuntimeError: ReadsTrainer is not attached to a `Trainer`.); "
    "callbacks.memory_budget=null hides this"
)


def test_a_batchnorm_net_is_measured_at_2_and_4_samples_and_linear_beyond(make_cfg):
    subject = budget.from_config(make_cfg(*DENSE))
    found = subject.activation_model("32", None)
    assert found.samples == 2 and found.per_sample > 0
    # The line through 2 and 4 samples meets a whole micro-batch of 32, measured at once.
    (direct,) = subject.activation_bytes("32", None, subject.batch_size)
    assert subject.row("32", None).activations == direct


def test_a_batchnorm_net_trains_through_train_py_with_its_budget_line(tmp_path, capfd):
    code, out, err = run(train_entry.main, [*DENSE, *SHORT], tmp_path / "run", capfd)
    assert code == 0, err[-3000:]
    text = out + err
    assert "memory budget for LitClassifier (21,898 parameters, optimizer Adam)" in text
    line = re.search(r"memory budget: precision=32-true checkpointing=- weights=(.*)", text)
    assert line is not None, text[-3000:]
    assert re.search(r"activations=\d+\.\d KiB total=\d+\.\d KiB", line.group(1))
    assert "memory budget: skipped" not in text and "Traceback" not in text


def test_the_budget_command_prints_a_batchnorm_nets_figures(capsys):
    budget.main(DENSE)
    out = capsys.readouterr().out
    assert re.search(r"^32 +- +85\.5 KiB +85\.5 KiB +171\.1 KiB +\d+\.\d KiB +\d+\.\d KiB$", out,
                     re.MULTILINE), out  # fmt: skip
    assert "measured at 2 and 4 samples" in out


def test_a_step_that_fails_outside_a_trainer_trains_with_one_skip_line(tmp_path, capfd):
    code, out, err = run(train_entry.main, [*DENSE, *SHORT, READS_TRAINER], tmp_path / "run", capfd)
    assert code == 0, err[-3000:]
    text = out + err
    assert text.count("memory budget: skipped") == 1 and SKIP in text
    assert "Traceback" not in text
    assert (tmp_path / "run" / "metrics.json").exists()


def test_the_budget_command_says_in_one_line_what_it_could_not_measure(capsys):
    with pytest.raises(SystemExit) as stop:
        budget.main([*DENSE, READS_TRAINER])
    assert stop.value.code != 0
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: the memory budget could not measure ReadsTrainer (RuntimeError: ReadsTrainer "
        "is not attached to a `Trainer`.)"
    )


@pytest.mark.slow
@pytest.mark.parametrize("module", ["LitClassifier", "ReadsTrainer"])
def test_in_ddp_a_batchnorm_net_trains_and_a_failing_measurement_skips(tmp_path, module):
    target = f"model._target_=tests.user_project.lit_module.{module}"
    result = run_entry("train.py", *DENSE, *SHORT, target, "trainer=ddp", "trainer.devices=2",
                       "trainer.accelerator=cpu", run_dir=tmp_path / "run")  # fmt: skip
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "Traceback" not in text
    if module == "ReadsTrainer":
        assert text.count("memory budget: skipped") == 1 and SKIP in text
    else:
        assert "memory budget: precision=32-true checkpointing=- weights=85.5 KiB" in text
        assert "memory budget: skipped" not in text
    assert (tmp_path / "run" / "metrics.json").exists()
