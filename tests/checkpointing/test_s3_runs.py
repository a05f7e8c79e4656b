"""Training against the S3 test server: resume from the bucket, outages, no leaked secrets."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from litforge.checkpointing.uploader import UploadsPending
from litforge.training import train
from tests import helpers

SECRET = "planted-secret-5c1d9e"


@pytest.mark.parametrize("devices", ["1", pytest.param("2", marks=pytest.mark.slow)])
def test_checkpoints_go_to_s3_and_the_same_command_resumes(s3, tmp_path, devices):
    env = s3.env(secret=SECRET)
    args = ["debug=limit", "checkpoint.dir=s3://litforge/exp", "run_name=demo"]
    args.append(f"trainer.devices={devices}")
    first = helpers.run_entry("train.py", *args, run_dir=tmp_path / "run", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "no checkpoint in s3://litforge/exp/demo: starting fresh" in first.stdout
    keys = s3.keys(prefix="exp/demo/")
    assert not [k for k in keys if "write-test" in k]
    assert "exp/demo/step-00000006.ckpt" in keys and "exp/demo/step-00000006.ckpt.complete" in keys

    again = helpers.run_entry(
        "train.py", *args, "trainer.max_epochs=3", run_dir=tmp_path / "run", env=env
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from s3://litforge/exp/demo/step-00000006.ckpt" in again.stdout
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["global_step"] == 9
    assert metrics["best_checkpoint"].startswith("s3://litforge/exp/demo/step-")

    evaluated = helpers.run_entry(
        "eval.py", f"ckpt_path={metrics['best_checkpoint']}", "debug=limit",
        run_dir=tmp_path / "eval", env=env,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert (
        json.loads((tmp_path / "eval" / "metrics.json").read_text())["test/acc"]
        == metrics["test/acc"]
    )

    outputs = [first.stdout, first.stderr, again.stdout, again.stderr, evaluated.stdout]
    outputs += [p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*") if p.is_file()]
    assert not [text for text in outputs if SECRET in text]


@pytest.fixture
def outage_cfg(s3, make_cfg):
    helpers.CURRENT_S3 = s3

    def make(*extra: str):
        return make_cfg(
            "debug=limit", "trainer.max_epochs=4", "checkpoint.dir=s3://litforge/exp",
            "checkpoint.every_n_train_steps=2", "checkpoint.keep_last=100",
            "checkpoint.upload_retries=1", "+callbacks.outage._target_=tests.helpers.StoreOutage",
            # Fail fast while the server is down instead of botocore's own retries.
            "+checkpoint.storage_options.config_kwargs.retries.max_attempts=1",
            *extra,
        )  # fmt: skip

    yield make
    helpers.CURRENT_S3 = None


@pytest.mark.parametrize("async_upload", [False, True])
def test_store_outage_mid_run_loses_nothing(outage_cfg, s3, tmp_path, caplog, async_upload):
    cfg = outage_cfg(
        "+callbacks.outage.stop_at=3", "+callbacks.outage.restart_at=8",
        f"checkpoint.async_upload={async_upload}",
    )  # fmt: skip
    with caplog.at_level(logging.WARNING):
        metrics = train(cfg)
    assert metrics["global_step"] == 12
    if not async_upload:  # in the background the retries may simply outlast the outage
        assert any("not uploaded to s3://litforge/exp" in r.getMessage() for r in caplog.records)
    keys = s3.keys(prefix="exp/")
    # Saved while the store was down (steps 4 and 6), uploaded once it came back.
    for step in (4, 6, 8, 10, 12):
        assert any(k.endswith(f"step-{step:08d}.ckpt.complete") for k in keys), (step, keys)
    assert not list((tmp_path / "run" / "checkpoint-staging").glob("step-*.ckpt"))


@pytest.mark.parametrize("async_upload", [False, True])
def test_store_still_down_at_the_end_names_the_local_copies(outage_cfg, tmp_path, async_upload):
    cfg = outage_cfg(
        "+callbacks.outage.stop_at=3", "checkpoint.final_upload_timeout_s=1",
        f"checkpoint.async_upload={async_upload}",
    )  # fmt: skip
    with pytest.raises(UploadsPending, match="kept locally") as err:
        train(cfg)
    staged = sorted((tmp_path / "run" / "checkpoint-staging").glob("step-*.ckpt"))
    assert staged and all(str(p) in str(err.value) for p in staged)
    assert Path(staged[-1]).name == "step-00000012.ckpt"


def test_staged_checkpoints_are_uploaded_before_the_rerun_resumes(outage_cfg, s3, tmp_path, caplog):
    """Issue 9.2: the rerun resumed from an older remote step and overwrote staged ones."""
    cfg = outage_cfg("+callbacks.outage.stop_at=3", "checkpoint.final_upload_timeout_s=1")
    with pytest.raises(UploadsPending):
        train(cfg)
    staging = tmp_path / "run" / "checkpoint-staging"
    staged = sorted(p.name for p in staging.glob("step-*.ckpt"))
    assert staged[-1] == "step-00000012.ckpt"
    s3.start()  # the store is back (moto starts empty: only the staged copies remain)
    caplog.set_level(logging.INFO, logger="litforge")
    metrics = train(outage_cfg("trainer.max_epochs=5", "~callbacks.outage"))
    messages = [r.getMessage() for r in caplog.records]
    assert "resuming from s3://litforge/exp/run/step-00000012.ckpt" in messages, messages
    assert metrics["global_step"] == 15
    keys = s3.keys(prefix="exp/run/")
    assert all(f"exp/run/{name}.complete" in keys for name in staged)
    assert not list(staging.glob("step-*"))
