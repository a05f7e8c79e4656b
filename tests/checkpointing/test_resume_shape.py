"""Resuming on another machine: another number of processes or micro-batch keeps the
effective batch and goes on with exactly the samples not yet consumed."""

from __future__ import annotations

import collections
import csv
import hashlib
import json
import logging
from pathlib import Path

import pytest

from litforge import build
from litforge.data.global_order import GlobalOrderSampler
from litforge.errors import ConfigError
from litforge.training import train
from tests.helpers import run_entry

TRAIN_SET = 1197  # digits training samples
BASE = [
    "+callbacks.rec._target_=tests.helpers.RecordSamples", "test=false", "run_name=shape",
    "trainer.max_epochs=-1", "checkpoint.every_n_train_steps=5", "trainer.log_every_n_steps=1",
]  # fmt: skip


def shape(devices: int, batch: int) -> list[str]:
    return ["trainer=ddp", f"trainer.devices={devices}", f"data.batch_size={batch}"]


def epochs(run_dir: Path) -> dict[int, collections.Counter]:
    """Per epoch, how often each sample (by its input's hash) was trained on, all ranks
    and both runs together."""
    seen: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for path in (run_dir / "samples").glob("rank*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            seen[record["epoch"]].update(record["x"])
    return seen


def losses(run_dir: Path) -> list[tuple[int, float]]:
    rows = []
    for path in sorted(run_dir.rglob("metrics.csv")):
        with open(path, newline="") as file:
            rows += [(int(r["step"]), float(r["train/loss_step"])) for r in csv.DictReader(file)
                     if r.get("train/loss_step")]  # fmt: skip
    return sorted(set(rows))


def check_once_each(run_dir: Path, dropped: int) -> None:
    first = epochs(run_dir)[0]
    assert set(first.values()) == {1}  # no training sample of epoch 0 twice ...
    assert len(first) == TRAIN_SET - dropped  # ... and each but the rest cut at its end


def stop_and_resume(run_dir: Path, before: list[str], after: list[str]) -> str:
    """10 steps with `before`, then on to 19 with `after`; what the resumed run said."""
    first = run_entry("train.py", *BASE, *before, "trainer.max_steps=10", run_dir=run_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_entry("train.py", *BASE, *after, "trainer.max_steps=19", run_dir=run_dir)
    assert second.returncode == 0, second.stderr[-3000:]
    return second.stdout + second.stderr


# Slow for CI time; make test covers it by DDP 2 -> 1 with the same effective batch: test_a_datamodule_dividing_its_batch_keeps_the_real_effective_batch.
@pytest.mark.slow
def test_two_processes_resume_as_one_with_the_same_effective_batch(tmp_path):
    run_dir = tmp_path / "run"
    said = stop_and_resume(run_dir, shape(2, 32), shape(1, 32))
    assert (
        "resuming on another shape: was 2 processes x 32 per batch x "
        "trainer.accumulate_grad_batches=1 = 64, now 1 processes x 32 per batch x "
        "trainer.accumulate_grad_batches=2 = 64: trainer.accumulate_grad_batches 1 -> 2 keeps "
        "the effective batch 64"
    ) in said
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["global_step"] == 19 and metrics["effective_batch_size"] == 64
    check_once_each(run_dir, dropped=0)  # 19 steps of 64 end the epoch of 1,197 (on 1 process)
    curve = losses(run_dir)
    before = [loss for step, loss in curve if step < 10]
    after = [loss for step, loss in curve if step >= 10]
    assert max(after) < before[0]  # the loss goes on from where it was, not from the start


USER_CONF = Path(__file__).resolve().parents[1] / "user_project" / "conf"
# lightning-hydra-template's DataModule: data.batch_size=64 is 32 per process under 2.
DIVIDING = [f"hydra.searchpath=[file://{USER_CONF}]", "model=lht_mlp", "data=lht_digits",
            "data._target_=tests.checkpointing.lht_datamodule.DividingDigits",
            "data.batch_size=64"]  # fmt: skip


def per_step(run_dir: Path, rank: int) -> dict[int, int]:
    """Samples rank `rank` trained on at each optimizer step (both runs)."""
    counts: collections.Counter = collections.Counter()
    for line in (run_dir / "samples" / f"rank{rank}.jsonl").read_text().splitlines():
        record = json.loads(line)
        counts[record["step"]] += len(record["x"])
    return dict(counts)


def test_a_datamodule_dividing_its_batch_keeps_the_real_effective_batch(tmp_path):
    run_dir = tmp_path / "run"
    first = run_entry("train.py", *BASE, *DIVIDING, "trainer=ddp", "trainer.devices=2",
                      "trainer.max_steps=10", run_dir=run_dir)  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    said = first.stdout + first.stderr
    assert "effective batch size 64 = batch_size 32 per process" in said
    assert json.loads((run_dir / "metrics.json").read_text())["effective_batch_size"] == 64
    assert per_step(run_dir, 0) == per_step(run_dir, 1) == {s: 32 for s in range(10)}

    second = run_entry("train.py", *BASE, *DIVIDING, "trainer=ddp", "trainer.devices=1",
                       "trainer.max_steps=14", run_dir=run_dir)  # fmt: skip
    assert second.returncode == 0, second.stderr[-3000:]
    said = second.stdout + second.stderr
    assert (
        "resuming on another shape: was 2 processes x 32 per batch x "
        "trainer.accumulate_grad_batches=1 = 64, now 1 processes x 64 per batch x "
        "trainer.accumulate_grad_batches=1 = 64: the effective batch stays 64"
    ) in said
    assert "effective batch size 64 = batch_size 64 per process" in said
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["global_step"] == 14 and metrics["effective_batch_size"] == 64
    # What the one process really trained on per step after the resume: 64, not 128.
    assert {s: n for s, n in per_step(run_dir, 0).items() if s >= 10} == {
        s: 64 for s in range(10, 14)
    }


@pytest.mark.slow
def test_one_process_resumes_as_two(tmp_path):
    run_dir = tmp_path / "run"
    said = stop_and_resume(run_dir, shape(1, 64), shape(2, 32))
    assert (
        "now 2 processes x 32 per batch x trainer.accumulate_grad_batches=1 = 64: "
        "the effective batch stays 64"
    ) in said
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["global_step"] == 19
    check_once_each(run_dir, dropped=1)  # 1,197 - 10 x 64 = 557 left, on 2 processes


def test_another_micro_batch_keeps_the_effective_batch_and_the_order(make_cfg, tmp_path, caplog):
    run_dir = tmp_path / "run"
    common = ["trainer=cpu", *BASE]
    train(make_cfg(*common, "data.batch_size=64", "trainer.max_steps=10", run_dir=run_dir))
    metrics = train(
        make_cfg(*common, "data.batch_size=16", "trainer.max_steps=19", run_dir=run_dir)
    )
    assert metrics["global_step"] == 19 and metrics["effective_batch_size"] == 64
    check_once_each(run_dir, dropped=0)
    steps = collections.Counter()
    for line in (run_dir / "samples" / "rank0.jsonl").read_text().splitlines():
        record = json.loads(line)
        steps[record["step"]] += len(record["x"])
    assert all(steps[s] == 64 for s in range(18))  # 16 x 4 after the resume, as 64 x 1 before
    # The same command again: the checkpoint's shape is its own (16 x 4), no other shape.
    with caplog.at_level(logging.INFO, logger="litforge"):
        train(make_cfg(*common, "data.batch_size=16", "trainer.max_steps=21", run_dir=run_dir))
    assert "resuming on another shape" not in caplog.text
    assert (
        "resuming with the checkpoint's own shape (1 processes x 16 per batch x "
        "trainer.accumulate_grad_batches=4 = 64): trainer.accumulate_grad_batches stays 4, "
        "not the configured 1, so the effective batch stays 64"
    ) in caplog.text


def test_strict_refuses_another_shape_before_training(make_cfg, tmp_path):
    run_dir = tmp_path / "run"
    common = ["trainer=cpu", *BASE]
    train(make_cfg(*common, "data.batch_size=64", "trainer.max_steps=5", run_dir=run_dir))
    cfg = make_cfg(*common, "data.batch_size=16", "trainer.max_steps=10", "resume_shape=strict",
                   run_dir=run_dir)  # fmt: skip
    with pytest.raises(ConfigError) as err:
        train(cfg)
    message = str(err.value)
    assert message.startswith(
        "resume_shape=strict: the checkpoint was written by 1 processes x 64 per batch x "
        "trainer.accumulate_grad_batches=1 = 64, this run is 1 processes x 16 per batch"
    )
    lines = (run_dir / "samples" / "rank0.jsonl").read_text().splitlines()
    assert len(lines) == 5  # nothing trained after the refusal


def test_an_effective_batch_that_cannot_be_kept_is_one_line(make_cfg, tmp_path):
    run_dir = tmp_path / "run"
    common = ["trainer=cpu", *BASE]
    train(make_cfg(*common, "data.batch_size=48", "trainer.max_steps=5", run_dir=run_dir))
    with pytest.raises(ConfigError, match=r"cannot keep the effective batch 48 of the checkpoint"):
        train(make_cfg(*common, "data.batch_size=32", "trainer.max_steps=10", run_dir=run_dir))


@pytest.mark.slow
def test_fsdp_two_processes_resume_as_one(tmp_path, make_cfg):
    """A sharded checkpoint of 2 processes reshards onto 1 (torch distributed checkpoint)."""
    run_dir = tmp_path / "run"
    gpt = ["experiment=gpt_char", "data.block_size=32", "model.net.n_layer=2",
           "model.net.n_embd=32", "model.net.n_head=2", "trainer=fsdp"]  # fmt: skip
    first = run_entry("train.py", *BASE, *gpt, "trainer.devices=2", "data.batch_size=8",
                      "trainer.max_steps=6", run_dir=run_dir)  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_entry("train.py", *BASE, *gpt, "trainer.devices=1", "data.batch_size=16",
                       "trainer.max_steps=12", run_dir=run_dir)  # fmt: skip
    assert second.returncode == 0, second.stderr[-3000:]
    assert "the effective batch stays 16" in second.stdout + second.stderr
    assert json.loads((run_dir / "metrics.json").read_text())["global_step"] == 12
    # Exactly the first 12 x 16 samples of epoch 0's permutation, whichever process drew them.
    datamodule = build.build_datamodule(make_cfg(*gpt, run_dir=tmp_path / "compose"))
    datamodule.setup("fit")
    order = GlobalOrderSampler(len(datamodule.train_set), seed=datamodule.shuffle_seed).order()
    expected = collections.Counter(
        hashlib.sha1(datamodule.train_set[i][0].numpy().tobytes()).hexdigest()[:16]
        for i in order[: 12 * 16]
    )
    assert epochs(run_dir)[0] == expected
