"""Training shards that changed between a run and its resume are noticed before the first
step: one line naming the stream and what changed, or, with data.accept_changed_data, the
next epoch's start in a fresh order, each sample once."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch

from litforge.data.shards.audit import read_ids
from litforge.data.shards.datamodule import StreamDataModule
from litforge.data.shards.writer import write_shards
from litforge.errors import ConfigError
from litforge_examples.data.digits import DigitsDataModule
from tests.data.test_loaders import fake_trainer
from tests.helpers import run_entry


def write(url: str, samples: list[torch.Tensor], per_shard: int) -> None:
    for split in ("train", "val", "test"):
        write_shards(samples, f"{url}/{split}", samples_per_shard=per_shard, samples_per_block=8,
                     overwrite=True)  # fmt: skip


def numbered(n: int, offset: int = 0) -> list[torch.Tensor]:
    return [torch.tensor([i + offset]) for i in range(n)]


def saved_state(url: str) -> dict:
    return StreamDataModule(url, batch_size=4).state_dict()


def test_a_resume_onto_re_sharded_data_is_one_line_naming_the_stream(tmp_path):
    url = str(tmp_path / "ds")
    write(url, numbered(120), per_shard=32)  # 4 shards
    state = saved_state(url)
    write(url, numbered(120), per_shard=24)  # the same 120 samples in 5 shards
    with pytest.raises(ConfigError) as refused:
        StreamDataModule(url, batch_size=4).load_state_dict(state)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"data.url={url}/train is not the data the checkpoint was reading: "
                           "its 120 samples are now in 5 shard(s), not 4")  # fmt: skip
    assert "data.accept_changed_data=true" in line and "resume=never" in line


def test_testing_a_checkpoint_reads_no_training_position_and_is_not_refused(tmp_path):
    import lightning as L
    from lightning.pytorch.trainer.states import TrainerFn

    url = str(tmp_path / "ds")
    write(url, numbered(120), per_shard=32)
    state = saved_state(url)
    write(url, numbered(130), per_shard=32)
    data = StreamDataModule(url, batch_size=4)
    data.trainer = L.Trainer(accelerator="cpu", devices=1, logger=False)
    data.trainer.state.fn = TrainerFn.TESTING  # trainer.test(ckpt_path=...): no refusal
    data.load_state_dict(state)
    data.trainer.state.fn = TrainerFn.FITTING
    with pytest.raises(ConfigError, match="it held 120 samples, now 130"):
        data.load_state_dict(state)


@pytest.mark.parametrize(
    ("rewrite", "what"),
    [
        (lambda url: write(url, numbered(120, offset=1000), 32),
         "its index.json was rewritten (still 120 samples in the same shards, other bytes)"),
        (lambda url: write(url, numbered(150), 32), "it held 120 samples, now 150"),
    ],
    ids=["same count, other content", "more samples"],
)  # fmt: skip
def test_rewritten_data_is_noticed_too(tmp_path, rewrite, what):
    url = str(tmp_path / "ds")
    write(url, numbered(120), per_shard=32)
    state = saved_state(url)
    rewrite(url)
    with pytest.raises(ConfigError, match=rf": {__import__('re').escape(what)}\. Resuming"):
        StreamDataModule(url, batch_size=4).load_state_dict(state)


def test_the_same_data_moved_elsewhere_resumes_and_a_mixture_names_its_stream(tmp_path):
    write(str(tmp_path / "a"), numbered(120), per_shard=32)
    state = saved_state(str(tmp_path / "a"))
    shutil.copytree(tmp_path / "a", tmp_path / "moved")
    StreamDataModule(str(tmp_path / "moved"), batch_size=4).load_state_dict(state)  # no error
    write(str(tmp_path / "b"), numbered(40), per_shard=16)
    streams = [{"url": str(tmp_path / "a")}, {"url": str(tmp_path / "b")}]
    state = StreamDataModule(streams=streams, batch_size=4).state_dict()
    write(str(tmp_path / "b"), numbered(48), per_shard=16)
    with pytest.raises(ConfigError, match=rf"^data.streams\[1\].url={tmp_path / 'b'}/train is "
                       "not the data .*: it held 40 samples, now 48"):  # fmt: skip
        StreamDataModule(streams=streams, batch_size=4).load_state_dict(state)


def test_accepted_changed_data_ends_the_restored_epoch_and_the_next_is_each_sample_once(
    tmp_path, caplog
):
    url = str(tmp_path / "ds")
    write(url, numbered(120), per_shard=32)
    before = StreamDataModule(url, batch_size=4)
    before.trainer = fake_trainer(world_size=1, rank=0)
    loader = before.train_dataloader()
    batches = iter(loader)
    for _ in range(5):
        next(batches)  # 20 of epoch 0's 120 samples, then the "checkpoint"
    state, loader_state = before.state_dict(), loader.state_dict()
    write(url, numbered(120), per_shard=24)
    ranks = []
    for rank in (0, 1):  # resumed on 2 processes
        data = StreamDataModule(url, batch_size=4, accept_changed_data=True)
        with caplog.at_level("WARNING", logger="litforge"):
            data.load_state_dict(state)
        data.trainer = fake_trainer(world_size=2, rank=rank)
        resumed = data.train_dataloader()
        resumed.load_state_dict(loader_state)
        assert list(resumed) == []  # the rest of the interrupted epoch is not trained
        resumed.sampler.set_epoch(1)  # Lightning's next epoch
        ranks += [int(x) for batch in resumed for x in batch]
    assert "data.accept_changed_data=true: the interrupted epoch ends here" in caplog.text
    assert sorted(ranks) == list(range(120))  # the new data's epoch, each sample once


def write_digits(url: Path, per_shard: int, splits=("train", "val", "test")) -> None:
    digits = DigitsDataModule(batch_size=64)
    digits.setup("fit")
    for split in splits:
        write_shards(getattr(digits, f"{split}_set"), str(url / split), overwrite=True,
                     samples_per_shard=per_shard, provides="labelled images")  # fmt: skip


ARGS = ["data=digits_stream", "data.record_ids=true", "test=false", "data.batch_size=256",
        "checkpoint.every_n_train_steps=2", "trainer.limit_val_batches=1"]  # fmt: skip


# In this process on a local directory: 2 of epoch 0's 5 steps, the same 1,197 samples
# re-sharded 4 -> 6, and the resume with the change accepted trains epoch 1 whole.
def test_a_digits_run_resumed_onto_re_sharded_data_with_the_change_accepted(
    tmp_path, make_cfg, caplog
):
    from litforge.training import train

    url = tmp_path / "digits"
    write_digits(url, per_shard=300)
    train(make_cfg(*ARGS, f"data.url={url}", "trainer.max_steps=2"))
    write_digits(url, per_shard=200, splits=("train",))
    with caplog.at_level("WARNING", logger="litforge"):
        metrics = train(make_cfg(*ARGS, f"data.url={url}", "trainer.max_steps=7",
                                 "data.accept_changed_data=true"))  # fmt: skip
    assert (
        f"data.url={url}/train is not the data the checkpoint was reading: its 1197 samples "
        "are now in 6 shard(s), not 4"
    ) in caplog.text
    assert metrics["global_step"] == 7  # 2 steps, then epoch 1 whole: 5 more
    epochs = read_ids(tmp_path / "run")
    assert sum(epochs[0].values()) == 2 * 256  # the interrupted epoch, cut short
    assert len(epochs[1]) == 1197 and set(epochs[1].values()) == {1}  # each sample once
    assert Counter(source.rsplit("/", 1)[1] for source, _ in epochs[1]) == {
        f"shard-0000{k}.lfs": 200 if k < 5 else 197 for k in range(6)
    }  # read from the new shards


# Slow: two train.py processes; make test covers the refusal in this file's DataModule
# tests (test_a_resume_onto_re_sharded_data_is_one_line_naming_the_stream) and Lightning
# restoring the record before the first step (..._with_the_change_accepted).
@pytest.mark.slow
def test_train_py_resumed_onto_re_sharded_data_stops_in_one_line(tmp_path):
    url, run_dir = tmp_path / "digits", tmp_path / "run"
    write_digits(url, per_shard=300)
    first = run_entry("train.py", *ARGS, f"data.url={url}", "trainer.max_steps=2", run_dir=run_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    write_digits(url, per_shard=200, splits=("train",))
    again = run_entry("train.py", *ARGS, f"data.url={url}", "trainer.max_steps=7", run_dir=run_dir)
    assert again.returncode == 2, again.stderr[-3000:]
    (line,) = [x for x in again.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: data.url={url}/train is not the data the checkpoint was "
                           "reading: its 1197 samples are now in 6 shard(s), not 4")  # fmt: skip
    assert "Traceback" not in again.stderr
    assert len(read_ids(run_dir)) == 1  # nothing trained after the refusal
