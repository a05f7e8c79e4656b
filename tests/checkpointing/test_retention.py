"""What StoreCheckpoint keeps and when it saves."""

from __future__ import annotations

from pathlib import Path

import torch

from litforge.checkpointing.callback import StoreCheckpoint
from litforge.checkpointing.store import CheckpointStore, Manifest, checkpoint_name, sha256_of
from litforge.training import train


def commit(store: CheckpointStore, saver: StoreCheckpoint, step: int, metric: float) -> None:
    local = Path(store.path(checkpoint_name(step)))
    torch.save({"step": step}, local)
    manifest = Manifest(local.name, step, local.stat().st_size, sha256_of(local), metric)
    store.upload(local, manifest)
    saver._on_commit(manifest)


def test_keeps_newest_best_and_resumed_from(tmp_path):
    store = CheckpointStore(str(tmp_path / "store"))
    store.check_access()
    saver = StoreCheckpoint(store, tmp_path / "staging", keep_last=2, mode="min")
    commit(store, saver, 1, metric=0.9)
    saver.resumed_from = checkpoint_name(1)  # as if this run had resumed from step 1
    for step, metric in [(2, 0.1), (3, 0.5), (4, 0.6), (5, 0.7), (6, 0.8)]:
        commit(store, saver, step, metric)
    kept = [m.step for m in store.manifests()]
    assert kept == [1, 2, 5, 6]  # resumed-from, best (0.1), newest two
    assert saver.best().step == 2
    assert store.names() == [checkpoint_name(s) for s in kept]  # files went with markers


def test_max_mode_keeps_the_highest(tmp_path):
    store = CheckpointStore(str(tmp_path / "store"))
    store.check_access()
    saver = StoreCheckpoint(store, tmp_path / "staging", keep_last=1, mode="max")
    for step, metric in [(1, 0.5), (2, 0.9), (3, 0.7)]:
        commit(store, saver, step, metric)
    assert [m.step for m in store.manifests()] == [2, 3]


def test_a_tie_ranks_the_save_at_the_validation_over_later_saves_with_its_value(tmp_path):
    """Step 6 was validated (0.2); steps 8 and 10 saved between validations and carry 0.2
    too, on weights it was not measured on: best is step 6, and it is kept."""
    store = CheckpointStore(str(tmp_path / "store"))
    store.check_access()
    saver = StoreCheckpoint(store, tmp_path / "staging", keep_last=2, mode="min")
    for step, metric in [(3, 0.5), (6, 0.2), (8, 0.2), (10, 0.2)]:
        commit(store, saver, step, metric)
    assert saver.best().step == 6
    assert [m.step for m in store.manifests()] == [6, 8, 10]


def test_time_interval_saves_between_validations(make_cfg, tmp_path):
    # 0.00001 minutes: due at every optimizer step, so steps that are not epoch ends appear.
    cfg = make_cfg(
        "debug=limit", "checkpoint.train_time_interval=0.00001", "checkpoint.keep_last=100",
        "checkpoint.save_on_validation=false",
    )  # fmt: skip
    train(cfg)
    steps = sorted(
        m.step for m in CheckpointStore(str(tmp_path / "run" / "checkpoints")).manifests()
    )
    assert steps == [1, 2, 4, 5, 6]  # step 3 is the last batch of epoch 0: no time save there
