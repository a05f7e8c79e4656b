"""The store against a real S3 server: layout, markers, resume choice, start-up errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from litforge.checkpointing import resume
from litforge.checkpointing.store import CheckpointStore, Manifest, checkpoint_name, sha256_of
from litforge.errors import ConfigError

CNN = "litforge_examples.nets.cnn.CNN"
MODEL = OmegaConf.create(
    {
        "_target_": "litforge_examples.models.classifier.Classifier",
        "net": {"_target_": CNN, "hidden": 8},
    }
)


def newest(store: CheckpointStore, tmp_path: Path):
    return resume.newest_complete(store, tmp_path / "staging", MODEL)


def put_checkpoint(store: CheckpointStore, tmp_path: Path, step: int, marker: bool = True) -> Path:
    local = tmp_path / checkpoint_name(step)
    checkpoint = {"state_dict": {"w": torch.full((4,), float(step))}, "global_step": step,
                  "litforge_model": OmegaConf.to_container(MODEL)}  # fmt: skip
    torch.save(checkpoint, local)
    manifest = Manifest(local.name, step, local.stat().st_size, sha256_of(local))
    if marker:
        store.upload(local, manifest)
    else:
        store.fs.put_file(str(local), store.path(local.name))
    return local


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> CheckpointStore:
    if request.param == "s3":
        request.getfixturevalue("s3")
    store = CheckpointStore(
        "s3://litforge/runs/demo" if request.param == "s3" else str(tmp_path / "s")
    )
    store.check_access()
    return store


def test_newest_complete_checkpoint_wins(store, tmp_path):
    for step in (5, 10, 15):
        put_checkpoint(store, tmp_path, step)
    local, name = newest(store, tmp_path)
    assert name == "step-00000015.ckpt"
    assert torch.load(local, weights_only=True)["global_step"] == 15


def test_markerless_and_corrupt_newest_are_skipped_with_a_warning(store, tmp_path, caplog):
    put_checkpoint(store, tmp_path, 5)
    put_checkpoint(store, tmp_path, 10)
    store.fs.pipe_file(store.path("step-00000010.ckpt"), b"truncated")  # marker now lies
    put_checkpoint(store, tmp_path, 15, marker=False)  # upload died before its marker
    local, name = newest(store, tmp_path)
    assert name == "step-00000005.ckpt"
    warnings = [r.getMessage() for r in caplog.records]
    assert any("step-00000015.ckpt: no completeness marker" in w for w in warnings)
    assert any("step-00000010.ckpt: size or sha256 differs" in w for w in warnings)


def test_checkpoints_present_but_none_usable_is_an_error(store, tmp_path):
    put_checkpoint(store, tmp_path, 5, marker=False)
    with pytest.raises(ConfigError, match="none is complete and intact"):
        newest(store, tmp_path)


def test_empty_store_means_start_fresh(store, tmp_path):
    assert newest(store, tmp_path) is None


class Payload:
    pass


def test_complete_checkpoint_with_pickled_object_is_refused(store, tmp_path):
    local = tmp_path / checkpoint_name(7)
    torch.save({"state_dict": {}, "evil": Payload()}, local)
    store.upload(local, Manifest(local.name, 7, local.stat().st_size, sha256_of(local)))
    with pytest.raises(ConfigError, match="Payload object; it is refused"):
        newest(store, tmp_path)


def test_a_checkpoint_of_another_model_is_refused(store, tmp_path):
    put_checkpoint(store, tmp_path, 5)
    other = OmegaConf.create(
        {
            "_target_": "litforge_examples.models.classifier.Classifier",
            "net": {"_target_": CNN, "hidden": 9},
        }
    )
    with pytest.raises(ConfigError, match=r"was trained with model.net.hidden=8.*hidden=9"):
        resume.newest_complete(store, tmp_path / "staging", other)


def test_deleting_removes_the_marker_too(store, tmp_path):
    put_checkpoint(store, tmp_path, 5)
    store.delete("step-00000005.ckpt")
    assert store.names() == [] and store.manifests() == []


def test_marker_is_json_with_size_and_hash(store, tmp_path):
    local = put_checkpoint(store, tmp_path, 3)
    marker = json.loads(store.fs.cat_file(store.path("step-00000003.ckpt.complete")))
    assert marker["bytes"] == local.stat().st_size
    assert marker["sha256"] == sha256_of(local)


def test_missing_bucket_is_caught_at_start(s3):
    with pytest.raises(ConfigError, match=r"checkpoint.dir=s3://no-such-bucket/x: .*bucket"):
        CheckpointStore("s3://no-such-bucket/x").check_access()
    assert "no-such-bucket" not in [b["Name"] for b in s3.client().list_buckets()["Buckets"]]


@pytest.mark.parametrize("url", ["nosuchproto://bucket/x", "s3://"])
def test_malformed_url_is_caught_at_start(s3, url):
    with pytest.raises(ConfigError, match="checkpoint.dir="):
        CheckpointStore(url).check_access()


def test_missing_credentials_are_caught_at_start(s3, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    import fsspec

    fsspec.filesystem("s3").clear_instance_cache()
    with pytest.raises(ConfigError, match=r"checkpoint.dir=s3://litforge/x: cannot"):
        CheckpointStore("s3://litforge/x").check_access()


def test_wrong_credentials_are_caught_at_start(s3_wrong_secret):
    with pytest.raises(ConfigError, match=r"checkpoint.dir=s3://litforge/x: cannot"):
        CheckpointStore("s3://litforge/x").check_access()


def test_a_marker_written_while_a_save_is_open_lands_at_once(store, tmp_path):
    """A background upload's marker, written while Lightning saves the next checkpoint inside
    `fs.transaction` of the same filesystem, is committed then, not with (or lost by) it."""
    with pytest.raises(OSError), store.fs.transaction:
        put_checkpoint(store, tmp_path, 4)
        assert store.fs.exists(store.path("step-00000004.ckpt.complete"))
        raise OSError("the next save failed")
    assert [m.step for m in store.manifests()] == [4]
