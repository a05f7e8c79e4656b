"""A fresh start on an existing run never mixes with the old run's checkpoints."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from litforge.training import train


def top_level_checkpoints(directory) -> list[str]:
    return sorted(p.name for p in directory.glob("step-*.ckpt"))


def test_resume_never_sets_the_old_run_aside(make_cfg, tmp_path, caplog):
    """Issue 9.1: the new run's checkpoint was deleted, the old run's reported as best."""
    caplog.set_level(logging.INFO, logger="litforge")
    ckpts = tmp_path / "run" / "checkpoints"
    old = train(make_cfg("debug=limit", "trainer.max_epochs=4", "optimized_metric=val/acc",
                         "optimized_mode=max"))  # fmt: skip
    assert old["global_step"] == 12
    old_files = top_level_checkpoints(ckpts)

    fresh = train(make_cfg("debug=limit", "trainer.max_epochs=1", "resume=never", "seed=3",
                           "optimized_metric=val/acc", "optimized_mode=max"))  # fmt: skip
    assert fresh["global_step"] == 3
    # Best, retention and the tested weights are this run's only.
    assert fresh["best_checkpoint"] == str(ckpts / "step-00000003.ckpt")
    assert top_level_checkpoints(ckpts) == ["step-00000003.ckpt"]
    saved = torch.load(ckpts / "step-00000003.ckpt", weights_only=True)
    assert saved["global_step"] == 3
    # The old run is kept, untouched, beside it.
    aside = [p for p in ckpts.iterdir() if p.is_dir() and p.name.startswith("superseded-")]
    assert len(aside) == 1 and top_level_checkpoints(aside[0]) == old_files
    assert all((aside[0] / (name + ".complete")).is_file() for name in old_files)
    assert "set aside" in "\n".join(r.getMessage() for r in caplog.records)

    # A later resume=auto continues the new run, not the old one.
    caplog.clear()
    resumed = train(make_cfg("debug=limit", "trainer.max_epochs=2", "seed=3",
                             "optimized_metric=val/acc", "optimized_mode=max"))  # fmt: skip
    assert f"resuming from {ckpts}/step-00000003.ckpt" in [r.getMessage() for r in caplog.records]
    assert resumed["global_step"] == 6
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["best_checkpoint"].startswith(str(ckpts / "step-0000000"))


def test_resume_never_on_s3_sets_aside_in_the_bucket(s3, make_cfg):
    args = ["debug=limit", "checkpoint.dir=s3://litforge/exp", "run_name=nv", "test=false"]
    train(make_cfg(*args, "trainer.max_epochs=2"))
    before = [k for k in s3.keys(prefix="exp/nv/") if k.endswith(".ckpt")]
    assert before
    train(make_cfg(*args, "trainer.max_epochs=1", "resume=never"))
    keys = s3.keys(prefix="exp/nv/")
    top = sorted(k for k in keys if k.count("/") == 2 and k.endswith(".ckpt"))
    assert top == ["exp/nv/step-00000003.ckpt"]
    aside = sorted(k.rsplit("/", 1)[1] for k in keys if "/superseded-" in k and k.endswith("ckpt"))
    assert aside == sorted(k.rsplit("/", 1)[1] for k in before)


@pytest.mark.parametrize("url", ["s3://", "s3:///", "gs://"])
def test_a_url_without_bucket_is_refused_before_anything_is_written(make_cfg, tmp_path, url):
    """Issue 9.7: `checkpoint.dir=s3://` wrote to a local directory named `s3:`."""
    from litforge.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"checkpoint.dir={url} names no bucket"):
        train(make_cfg("debug=fdr", f"checkpoint.dir={url}"))
    assert not list(tmp_path.rglob("s3:*")) and not list(tmp_path.rglob("gs:*"))
