"""The records litforge reads back from a checkpoint directory, a store or a run directory,
damaged, and the checkpoint file itself: a checkpoint's completeness marker (what resume
and the upload of staged checkpoints read), the run lock, run.json (read back by each
update and by `plan --from-run`), metrics.json (what a rerun of a finished run reports),
and a checkpoint's shape record and RNG states. Each reader gives the right result, or
skips the record with one line naming the file, or refuses it in one line; never a
traceback. A marker names the checkpoint's sha256 and a checkpoint file its members'
CRC-32s, so damage there never passes as other data; a JSON file without a checksum may
read as other valid figures, which must then pass the reader's own rules."""

from __future__ import annotations

import json
import logging
import math
import socket
import time
from pathlib import Path

import fsspec
import pytest
import torch
from omegaconf import OmegaConf

from litforge import run_record
from litforge.checkpointing import checkpoint_file, resume
from litforge.checkpointing.lock import RunLock, RunLocked
from litforge.checkpointing.store import (
    MARKER_SUFFIX,
    CheckpointStore,
    Manifest,
    checkpoint_name,
    digest,
)
from litforge.errors import ConfigError
from litforge.planning.plan import economics
from tests.fuzz.damage import damaged_copies

MODEL = {"_target_": "tests.Model", "net": {"_target_": "tests.Net", "hidden": 4}}


def put(path: Path, data: bytes | None) -> None:
    if data is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(data)


def checkpoint(tmp_path: Path, step: int) -> tuple[Path, Manifest]:
    local = tmp_path / "made" / checkpoint_name(step)
    local.parent.mkdir(exist_ok=True)
    torch.save({"state_dict": {"w": torch.full((4,), float(step))}, "litforge_model": MODEL,
                "global_step": step}, local)  # fmt: skip
    size, sha = digest(local)
    return local, Manifest(local.name, step, size, sha, metric=0.5 / step)


def test_a_damaged_marker_never_passes_a_checkpoint_and_says_so(tmp_path, caplog):
    (tmp_path / "store").mkdir()
    store = CheckpointStore(str(tmp_path / "store"))
    for step in (2, 4):
        store.upload(*checkpoint(tmp_path, step))
    newest = store.path(checkpoint_name(4) + MARKER_SUFFIX)
    original = Path(newest).read_bytes()
    model = OmegaConf.create(MODEL)
    for index, (label, data) in enumerate(damaged_copies(original, seed=5, count=80)):
        put(Path(newest), data)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="litforge"):
            local, name = resume.newest_complete(store, tmp_path / f"staging-{index}", model)
        if name == checkpoint_name(4):  # its marker still says exactly this file
            assert digest(local) == (Path(store.path(name)).stat().st_size,
                                     store.manifest(name).sha256), label  # fmt: skip
            assert store.manifest(name) == Manifest.from_json(original), label
            continue
        assert name == checkpoint_name(2), label
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and f"{store}/{checkpoint_name(4)}" in said[0], (label, said)
        assert ("no completeness marker" in said[0]) == (data is None), (label, said)
        assert torch.load(local, weights_only=True)["global_step"] == 2, label


def test_a_marker_too_large_to_be_one_is_not_read_whole(tmp_path, caplog):
    (tmp_path / "store").mkdir()
    store = CheckpointStore(str(tmp_path / "store"))
    local, manifest = checkpoint(tmp_path, 2)
    store.upload(local, manifest)
    marker = Path(store.path(local.name + MARKER_SUFFIX))
    marker.write_text(manifest.to_json() + " " * 10**6)  # valid JSON, a megabyte of it
    with caplog.at_level(logging.WARNING, logger="litforge"), pytest.raises(ConfigError):
        resume.newest_complete(store, tmp_path / "staging", OmegaConf.create(MODEL))
    assert "is unreadable (over 4096 bytes)" in caplog.text


def test_a_damaged_staged_marker_is_left_where_it_is(s3, tmp_path, caplog):
    store = CheckpointStore("s3://litforge/runs/staged")
    local, manifest = checkpoint(tmp_path, 6)
    staged = tmp_path / "staging"
    staged.mkdir()
    original = manifest.to_json().encode()
    for label, data in damaged_copies(original, seed=9, count=25):
        (staged / local.name).write_bytes(local.read_bytes())
        marker = staged / f"{local.name}{MARKER_SUFFIX}"
        put(marker, data)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="litforge"):
            uploaded = resume.upload_staged(store, staged)
        if uploaded:  # the marker still says exactly this checkpoint
            assert uploaded == [local.name] and store.manifest(local.name) == manifest, label
            store.delete(local.name)
            continue
        assert uploaded == [], label
        if data is not None:
            said = [r.getMessage() for r in caplog.records]
            assert len(said) == 1 and str(marker) in said[0], (label, said)
            assert (staged / local.name).exists(), label  # left where it is


def test_a_damaged_lock_is_its_holder_or_nobodys(tmp_path, caplog):
    fs = fsspec.filesystem("file")
    path = tmp_path / ".litforge-lock"
    holder = {"host": "another-host", "pid": 4242, "token": "theirs", "heartbeat": time.time()}
    original = json.dumps(holder).encode()
    for label, data in damaged_copies(original, seed=13, count=40):  # 50 ms each: a read-back
        put(path, data)
        lock = RunLock(fs, str(path), f"the run {tmp_path}", heartbeat_s=3600, stale_s=600)
        caplog.clear()
        try:
            with caplog.at_level(logging.WARNING, logger="litforge"):
                lock.acquire()
        except RunLocked as err:  # a live holder on another host, as the file still says
            assert str(err).startswith(f"the run {tmp_path} is in use by host"), (label, err)
            assert "\n" not in str(err), label
            continue
        lock.release()
        if data is not None and data != original:  # taken over: said in one line, named
            said = [r.getMessage() for r in caplog.records]
            assert len(said) == 1 and f"the run {tmp_path}" in said[0], (label, said)


def test_a_lock_holder_with_odd_fields_is_not_alive():
    from litforge.checkpointing.lock import holder_alive

    here = socket.gethostname()
    for odd in ({"heartbeat": "soon"}, {"heartbeat": float("nan")}, {"heartbeat": 1e300},
                {"host": here, "pid": "12", "heartbeat": time.time()},
                {"host": here, "pid": 0, "heartbeat": time.time()}):  # fmt: skip
        assert holder_alive(odd, stale_s=60) is False, odd


def run_json(run_dir: Path) -> bytes:
    """A run.json as a run leaves it: its start record, then each update."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"command": "train.py", "host": "h"}))
    run_record.update(run_dir, restart_s=12.5)
    run_record.update(run_dir, restart_phases_s={"restore": 1.25, "compile": 3.5})
    run_record.update(run_dir, checkpoint_save_s=0.75)
    return (run_dir / "run.json").read_bytes()


# Valid JSON of the wrong shape: what a hand edit or another program leaves.
ODD_RUN_JSON = ["[]", "5", '{"restart_s": "12"}', '{"restart_s": 1e999}', '{"restart_s": -3}',
                '{"restart_s": 1, "restart_phases_s": []}',
                '{"restart_s": 1, "restart_phases_s": {"compile": "x"}}',
                '{"restart_s": 1' + "0" * 400 + "}"]  # fmt: skip


def test_a_damaged_run_json_is_read_or_one_line(tmp_path, caplog):
    original = run_json(tmp_path / "original")
    expected = economics.from_run(tmp_path / "original")
    assert (expected.save_s, expected.restart_s) == (0.75, 16.0)
    odd = [(f"written as {text!r}", text.encode()) for text in ODD_RUN_JSON]
    for index, (label, data) in enumerate([*damaged_copies(original, seed=17, count=150), *odd]):
        run_dir = tmp_path / f"run-{index}"
        run_dir.mkdir()
        put(run_dir / "run.json", data)
        try:
            found = economics.from_run(run_dir)
        except ConfigError as err:
            assert str(err).startswith(f"--from-run {run_dir}: "), (label, str(err))
            assert "\n" not in str(err), (label, str(err))
        else:
            if data == original:
                assert found == expected, label
            for value in (found.save_s, found.restart_s):
                assert value is None or (math.isfinite(value) and value >= 0), (label, found)
        # The next update keeps the record, or writes it again with one line saying so.
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="litforge"):
            run_record.update(run_dir, fetched=1)
        record = json.loads((run_dir / "run.json").read_text())
        assert record["fetched"] == 1, label
        said = [r.getMessage() for r in caplog.records]
        assert len(said) <= 1 and all(str(run_dir / "run.json") in s for s in said), label


@pytest.mark.parametrize("seed", [19, 23])
def test_a_damaged_metrics_json_gives_numbers_or_none(tmp_path, seed):
    metrics = {"val/loss": 0.25, "val/acc": 0.875, "global_step": 40, "epoch": 2,
               "best_checkpoint": "step-00000040.ckpt", "test/loss": float("nan")}  # fmt: skip
    original = json.dumps(metrics, indent=2, sort_keys=True).encode()
    path = tmp_path / "metrics.json"
    huge = ("an integer past a float", b'{"val/loss": 1' + b"0" * 400 + b"}")
    for label, data in [*damaged_copies(original, seed=seed, count=150), huge]:
        put(path, data)
        found = resume._numbers(path)
        assert all(isinstance(v, float) for v in found.values()), label
        assert not {"global_step", "epoch"} & set(found), label
        if data == original:
            assert found["val/loss"] == 0.25 and math.isnan(found["test/loss"]), label


def test_a_damaged_checkpoint_file_is_its_contents_or_one_line(tmp_path):
    """`ckpt_path=`, `restore.from` and eval read a file no marker vouches for: torch.load
    does not check the zip's CRC-32s, litforge does."""
    original_path, _ = checkpoint(tmp_path, 8)
    original = original_path.read_bytes()
    expected = torch.load(original_path, weights_only=True)
    for index, (label, data) in enumerate(damaged_copies(original, seed=29, count=600)):
        path = tmp_path / f"damaged-{index}.ckpt"
        put(path, data)
        try:
            found = checkpoint_file.load(str(path))
        except ConfigError as err:
            assert str(err).startswith(f"ckpt_path={path}"), (label, str(err))
            assert "\n" not in str(err), (label, str(err))
            continue
        assert set(found) == set(expected), label
        assert torch.equal(found["state_dict"]["w"], expected["state_dict"]["w"]), label
        assert {k: v for k, v in found.items() if k != "state_dict"} == {
            k: v for k, v in expected.items() if k != "state_dict"
        }, label


@pytest.mark.parametrize(
    "saved",
    [[4, 1, 1], {"micro_batch": 4, "accumulate": 1}, {"micro_batch": "4", "accumulate": 1,
     "processes": 1}, {"micro_batch": 0, "accumulate": 1, "processes": 1},
     {"micro_batch": 4, "accumulate": True, "processes": 1},
     {"micro_batch": 4.0, "accumulate": 1, "processes": 1},
     {"micro_batch": 4, "accumulate": 1, "processes": 1, "extra": 2}],
)  # fmt: skip
def test_a_shape_record_litforge_did_not_write_is_one_line(saved):
    """A checkpoint whose bytes are intact can still be written by anyone: its shape record
    (micro-batch, accumulation, processes) is checked before a resume adapts to it."""
    from litforge.checkpointing.shape import Shape, _saved_shape

    with pytest.raises(ConfigError, match="^the checkpoint's shape record .* is not one"):
        _saved_shape(saved)
    assert _saved_shape({"micro_batch": 4, "accumulate": 2, "processes": 1}) == Shape(4, 2, 1)


def odd_rng_states() -> list[object]:
    from litforge.checkpointing.rng import capture

    states = []
    for key, value in (("torch", torch.zeros(3)), ("torch", "state"), ("numpy", [1, 2]),
                       ("numpy", ["MT19937", torch.zeros(5, dtype=torch.int64), 0, 0, 0.0]),
                       ("python", [3, torch.zeros(2, dtype=torch.int64), None]),
                       ("python", None)):  # fmt: skip
        state = capture()
        state[key] = value
        states.append({"per_rank": [state]})
    bare = capture()
    del bare["numpy"]
    return [*states, {"per_rank": [bare]}, {"per_rank": ["x"]}]


@pytest.mark.parametrize("saved", ["x", {"per_rank": 5}, *odd_rng_states()])
def test_rng_states_litforge_did_not_write_are_one_line(saved):
    from litforge.checkpointing.rng import RngState, capture

    callback = RngState()
    with pytest.raises(ConfigError, match="^the checkpoint's RNG states are not ones"):
        callback.load_state_dict(saved)  # type: ignore[arg-type]
        callback.on_train_start(None, None)  # type: ignore[arg-type]
    good = RngState()
    good.load_state_dict({"per_rank": [capture()]})
    good.on_train_start(None, None)  # type: ignore[arg-type]
