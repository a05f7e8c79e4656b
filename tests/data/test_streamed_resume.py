"""Kill -9 mid-epoch and resume streamed data on another number of processes or loader
workers: the audit files (`data.record_ids`) hold each sample of the epoch exactly as often
as the uninterrupted run's, and at the same shape the weights end bitwise equal."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from litforge.data.shards.audit import read_ids
from tests.checkpointing.test_resume_exact import assert_bitwise_equal, final_checkpoint
from tests.data.test_streamed_training import write_digits
from tests.helpers import run_entry

EFFECTIVE = 48  # 2 x 24, 3 x 16, 1 x 48: one effective batch on every shape
LAST = 25  # ceil(1197 / 48): the epoch's last step
BASE = ["data=digits_stream", "data.record_ids=true", "trainer.max_steps=25",
        "checkpoint.every_n_train_steps=3", "trainer.limit_val_batches=1",
        "trainer.val_check_interval=null", "trainer.deterministic=true", "test=false",
        "run_name=streamed"]  # fmt: skip
ONE = ["data.url=s3://litforge/digits"]
TWO = ["data.streams=[{url: 's3://litforge/digits', weight: 2}, "
       "{url: 's3://litforge/digits2', weight: 1}]"]  # fmt: skip


def processes(n: int) -> list[str]:
    extra = ["trainer=ddp", f"trainer.devices={n}"] if n > 1 else []
    return [*extra, f"data.batch_size={EFFECTIVE // n}"]


def kill_at(step: int) -> list[str]:
    return ["+callbacks.kill._target_=tests.helpers.KillAtStep", f"+callbacks.kill.step={step}"]


def trained_ids(run_dir: Path) -> collections.Counter:
    epochs = read_ids(run_dir)
    assert set(epochs) == {0}, sorted(epochs)  # the run is the first epoch, whole
    return epochs[0]


def run_in_turns(tmp_path: Path, stream: list[str], turns: list[list[str]], env: dict) -> Path:
    """The uninterrupted run, then one run directory through `turns` (each killed at its
    step but the last); both runs' directories."""
    reference = run_entry("train.py", *BASE, *stream, *turns[-1][1:], run_dir=tmp_path / "ref",
                          env=env)  # fmt: skip
    assert reference.returncode == 0, reference.stderr[-3000:]
    resumed = tmp_path / "resumed"
    for turn in turns:
        step, shape = turn[0], turn[1:]
        killer = kill_at(int(step)) if step is not None else []
        done = run_entry("train.py", *BASE, *stream, *shape, *killer, run_dir=resumed, env=env)
        if step is None:
            assert done.returncode == 0, done.stderr[-3000:]
        else:
            assert done.returncode == -9, done.stderr[-3000:]
    return resumed


@pytest.fixture
def digits_on_s3(s3):
    write_digits("s3://litforge/digits")
    write_digits("s3://litforge/digits2")
    return s3.env()


# Slow: four training runs (a minute); make test covers its parts: the loader's state
# across worker counts and the audit's cut-back in tests/data/test_audit_and_loader.py, the
# samplers' positions on any shape in test_shards.py and test_mixture.py.
@pytest.mark.slow
@pytest.mark.parametrize("stream", [ONE, TWO], ids=["one stream", "a mixture"])
def test_workers_0_2_1_killed_and_resumed_is_the_uninterrupted_run_bitwise(
    tmp_path, digits_on_s3, stream
):
    turns = [[8, *processes(1), "data.num_workers=0"], [14, *processes(1), "data.num_workers=2"],
             [None, *processes(1), "data.num_workers=1"]]  # fmt: skip
    resumed = run_in_turns(tmp_path, stream, turns, digits_on_s3)
    assert trained_ids(resumed) == trained_ids(tmp_path / "ref")
    expected, got = final_checkpoint(tmp_path / "ref", LAST), final_checkpoint(resumed, LAST)
    assert_bitwise_equal(expected["state_dict"], got["state_dict"], "state_dict")
    assert_bitwise_equal(expected["optimizer_states"], got["optimizer_states"], "optimizer")


# Slow: five DDP starts on two cores; make test covers the same position rules on
# 2 -> 3 -> 1 processes in tests/data/test_mixture.py and test_shards.py (samplers alone).
@pytest.mark.slow
@pytest.mark.parametrize("stream", [ONE, TWO], ids=["one stream", "a mixture"])
def test_processes_2_3_1_killed_and_resumed_train_each_sample_once(tmp_path, digits_on_s3, stream):
    turns = [[8, *processes(2)], [14, *processes(3)], [None, *processes(1)]]
    resumed = run_in_turns(tmp_path, stream, turns, digits_on_s3)
    ids, expected = trained_ids(resumed), trained_ids(tmp_path / "ref")
    assert ids == expected  # zero repeats, zero skips: the last turn has no padding
    assert len(list((resumed / "sample_ids").glob("rank-*.tsv"))) == 3


# Slow: two DDP runs; the one-process case above is in make test.
@pytest.mark.slow
def test_two_processes_killed_and_resumed_on_two_are_bitwise(tmp_path, digits_on_s3):
    turns = [[11, *processes(2)], [None, *processes(2)]]
    resumed = run_in_turns(tmp_path, TWO, turns, digits_on_s3)
    assert trained_ids(resumed) == trained_ids(tmp_path / "ref")
    expected, got = final_checkpoint(tmp_path / "ref", LAST), final_checkpoint(resumed, LAST)
    assert_bitwise_equal(expected["state_dict"], got["state_dict"], "state_dict")
