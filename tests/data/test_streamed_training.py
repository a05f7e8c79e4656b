"""`data=digits_stream`: the digits example trained from shards in the S3 test server."""

from __future__ import annotations

import json
import logging

import pytest

from litforge import write_shards
from litforge.commands.shards import main as shards_command
from litforge_examples.data.digits import DigitsDataModule
from tests.helpers import ROOT, run_entry


def write_digits(url: str) -> None:
    digits = DigitsDataModule(batch_size=64)
    digits.setup("fit")
    for split in ("train", "val", "test"):
        write_shards(getattr(digits, f"{split}_set"), f"{url}/{split}", provides="labelled images")


def test_digits_streamed_from_a_bucket_train_as_in_memory(s3, tmp_path):
    write_digits("s3://litforge/digits")
    done = run_entry(
        "train.py", "data=digits_stream", "data.url=s3://litforge/digits",
        f"data.cache_dir={tmp_path / 'cache'}", "trainer.max_epochs=6", "test=false",
        run_dir=tmp_path / "run", env=s3.env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # In memory the same 6 epochs reach 0.97; the streamed order differs, not the data.
    assert metrics["val/acc"] >= 0.95, metrics
    assert list((tmp_path / "cache").glob("*.blk"))  # the blocks went through the cache


def test_a_url_without_shards_is_one_line_before_training(tmp_path):
    done = run_entry(
        "train.py", "data=digits_stream", f"data.url={tmp_path / 'none'}", run_dir=tmp_path / "run"
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"error: data.url={tmp_path / 'none'}/train: no index.json there" in done.stderr
    assert "Traceback" not in done.stderr


USER_CONF = ROOT / "tests" / "user_project" / "conf"
USER = [f"hydra.searchpath=[file://{USER_CONF}]", "model=lht_mlp"]


def test_a_plain_user_datamodule_written_to_shards_trains_its_model_from_them(s3, tmp_path, capsys):
    """lightning-hydra-template's DataModule (data_train, data_val, data_test) is written
    as it is; its own model then trains from the bucket, neither changed."""
    # The command in this process (the s3 fixture's environment is its own), train.py not.
    shards_command(["write", *USER, "data=lht_digits", "--url", "s3://litforge/user",
                    "--samples-per-shard", "512"])  # fmt: skip
    assert (
        "train: 1197 samples in 3 shard(s) at s3://litforge/user/train" in capsys.readouterr().out
    )
    done = run_entry(
        "train.py", *USER, "data=digits_stream", "data.url=s3://litforge/user",
        "trainer.max_epochs=6", "test=false", run_dir=tmp_path / "run", env=s3.env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["val/acc"] >= 0.9, metrics  # its in-memory run: 0.94 in 6 epochs


# Slow for CI time: make test covers refused credentials in one line before any shard is
# encoded (test_shards.py::test_writing_where_the_credentials_are_refused_...), and a read
# that fails after its retries (test_a_store_that_goes_away_is_retried_then_one_line).
@pytest.mark.slow
def test_shards_written_with_wrong_credentials_or_endpoint_are_one_line(s3_wrong_secret, tmp_path):
    done = run_entry(
        "train.py", "data=digits_stream", "data.url=s3://litforge/digits",
        run_dir=tmp_path / "run", env=s3_wrong_secret.env(secret="wrong"),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: data.url=s3://litforge/digits/train: reading index.json")
    assert "failed 1 time(s)" in line and "AWS_SECRET_ACCESS_KEY" in line
    assert "resumes" not in line  # before training: no checkpoint to resume from yet
    assert "wrong" not in done.stderr and "Traceback" not in done.stderr
    gone = run_entry(
        "train.py", "data=digits_stream", "data.url=s3://litforge/digits", run_dir=tmp_path / "run2",
        env={**s3_wrong_secret.env(), "AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
    )  # fmt: skip
    assert gone.returncode == 2, gone.stderr[-3000:]
    assert "error: data.url=s3://litforge/digits/train: reading index.json failed" in gone.stderr


def test_a_store_outage_mid_epoch_stops_in_one_line_and_the_rerun_continues(
    s3, tmp_path, make_cfg, caplog
):
    from litforge.data.shards.reader import DataStoreUnreachable
    from litforge.training import train
    from tests import helpers

    write_digits("s3://litforge/digits")
    args = ["data=digits_stream", "data.url=s3://litforge/digits", "data.retries=1",
            "data.shuffle_window=1",  # one block per batch: every step reads the store
            "data.readahead_bytes=0",  # (read ahead, the next blocks are already here)
            "trainer.max_steps=12", "checkpoint.every_n_train_steps=3", "test=false"]  # fmt: skip
    helpers.CURRENT_S3 = s3
    try:
        outage = [
            "+callbacks.outage._target_=tests.helpers.StoreOutage",
            "+callbacks.outage.stop_at=7",
        ]
        with pytest.raises(DataStoreUnreachable, match=r"^data.url=s3://litforge/digits/train: "
                           r"reading shard-00000.lfs failed 2 time\(s\)"):  # fmt: skip
            train(make_cfg(*args, *outage))
    finally:
        helpers.CURRENT_S3 = None
    saved = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("*.ckpt"))
    assert saved == ["step-00000003.ckpt", "step-00000006.ckpt"]
    s3.start()  # back, and empty (moto keeps nothing): the data is written again
    write_digits("s3://litforge/digits")
    caplog.set_level(logging.INFO, logger="litforge")
    assert train(make_cfg(*args))["global_step"] == 12
    resumed = f"resuming from {tmp_path / 'run' / 'checkpoints' / 'step-00000006.ckpt'}"
    assert resumed in [r.getMessage() for r in caplog.records]
