"""`data=digits_stream`: the digits example trained from shards in the S3 test server."""

from __future__ import annotations

import json

from litforge import write_shards
from litforge_examples.data.digits import DigitsDataModule
from tests.helpers import run_entry


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
