"""trainer=fsdp: two CPU processes over gloo shard the GPT, write sharded checkpoints to the
store, resume from them after a kill, and train as DDP does."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from litforge.build import build_module
from litforge.checkpointing import checkpoint_file
from litforge.checkpointing.consolidate import consolidate
from litforge.checkpointing.store import MARKER_SUFFIX, CheckpointStore, Manifest, digest
from litforge.commands import budget
from litforge.errors import ConfigError
from tests import helpers
from tests.checkpointing.test_resume_exact import assert_bitwise_equal

GPT = [*helpers.TINY_GPT, "model.net.n_layer=2", "trainer.limit_val_batches=2",
       "trainer.limit_test_batches=2", "checkpoint.every_n_train_steps=2"]  # fmt: skip
FSDP = [*GPT, "trainer=fsdp", "trainer.max_steps=4"]


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory) -> Path:
    """One 2-process FSDP run of 4 steps, checkpointing every 2."""
    run_dir = tmp_path_factory.mktemp("fsdp") / "run"
    done = helpers.run_entry("train.py", *FSDP, run_dir=run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def test_two_processes_shard_the_gpt_and_commit_sharded_checkpoints(fsdp_run):
    metrics = json.loads((fsdp_run / "metrics.json").read_text())
    assert metrics["global_step"] == 4
    assert metrics["effective_batch_size"] == 8 * 2  # data.batch_size x 2 processes
    best = Path(metrics["best_checkpoint"])
    assert best.parent == fsdp_run / "checkpoints"
    names = {p.name for p in best.iterdir()}
    assert names == {".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"}  # one per rank
    manifest = Manifest.from_json(best.with_name(best.name + MARKER_SUFFIX).read_text())
    assert (manifest.bytes, manifest.sha256) == digest(best)
    assert manifest.step == 4


def test_consolidate_writes_the_sharded_weights_as_one_file(fsdp_run, tmp_path):
    best = json.loads((fsdp_run / "metrics.json").read_text())["best_checkpoint"]
    single = torch.load(consolidate(best, tmp_path / "one.ckpt"), weights_only=True)
    assert_bitwise_equal(checkpoint_file.sharded_weights(Path(best)), single["state_dict"])
    assert single["litforge_model"]["_target_"].endswith("LanguageModel")
    with pytest.raises(ConfigError, match="single-file checkpoint already"):
        consolidate(str(tmp_path / "one.ckpt"), tmp_path / "two.ckpt")


@pytest.mark.slow  # eval.py in a process of its own: ~15 s
def test_eval_reads_a_sharded_checkpoint_as_it_is(fsdp_run, tmp_path):
    best = json.loads((fsdp_run / "metrics.json").read_text())["best_checkpoint"]
    evaluated = helpers.run_entry(
        "eval.py", *helpers.TINY_GPT, "model.net.n_layer=2", "trainer.limit_test_batches=2",
        f"ckpt_path={best}", run_dir=tmp_path / "eval",
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    tested = json.loads((fsdp_run / "metrics.json").read_text())["test/loss"]
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["test/loss"] == tested


def test_a_sharded_checkpoint_and_a_sharded_run_refuse_the_other_kind(fsdp_run, make_cfg):
    best = Path(json.loads((fsdp_run / "metrics.json").read_text())["best_checkpoint"])
    model = make_cfg(*GPT).model
    with pytest.raises(ConfigError, match="is a sharded checkpoint .* resume it with trainer=fsdp"):
        checkpoint_file.check_resumable(best, model, f"ckpt_path={best}", sharded=False)
    with tempfile.TemporaryDirectory() as tmp:
        single = consolidate(str(best), Path(tmp) / "one.ckpt")
        with pytest.raises(ConfigError, match="single-file checkpoint .* this run is sharded"):
            checkpoint_file.check_resumable(single, model, "ckpt_path=one.ckpt", sharded=True)
    checkpoint_file.check_resumable(best, model, "the resume point", sharded=True)


def test_fsdp_refuses_a_model_without_a_block_to_shard(make_cfg):
    with pytest.raises(ConfigError, match="trainer=fsdp: model=.*Classifier names no block class"):
        build_module(make_cfg("trainer=fsdp"))  # the digits CNN


def test_the_budget_divides_the_training_state_by_the_shards(make_cfg):
    whole = budget.from_config(make_cfg(*GPT)).row("32")
    sharded = budget.from_config(make_cfg(*GPT, "trainer=fsdp", "trainer.devices=4"))
    assert sharded.shards == 4
    row = sharded.row("32")
    for key in ("weights", "gradients", "optimizer"):
        assert getattr(row, key) == -(-getattr(whole, key) // 4), key
    assert row.activations == whole.activations  # each process still runs its micro-batch
    assert budget.fsdp_shards("2", 3) == 6 and budget.fsdp_shards([0, 1, 2], 1) == 3


def _final_state(store: CheckpointStore, step: int, where: Path) -> dict:
    local = store.download(f"step-{step:08d}.ckpt", where / "sharded")
    dcp_to_torch_save(local, where / "full.pt")
    return torch.load(where / "full.pt", weights_only=True)


@pytest.mark.slow  # three 2-process runs: ~1.5 min
def test_a_killed_fsdp_run_resumes_from_its_sharded_checkpoint_on_s3_bitwise(s3, tmp_path):
    env = s3.env()
    common = [*GPT, "trainer=fsdp", "trainer.max_steps=6", "trainer.deterministic=true",
              "checkpoint.dir=s3://litforge/fsdp"]  # fmt: skip
    reference = helpers.run_entry("train.py", *common, "run_name=ref", env=env,
                                  run_dir=tmp_path / "ref")  # fmt: skip
    assert reference.returncode == 0, reference.stderr[-3000:]
    killed = [*common, "run_name=killed", "+callbacks.kill._target_=tests.helpers.KillAtStep",
              "+callbacks.kill.step=3"]  # fmt: skip
    first = helpers.run_entry("train.py", *killed, env=env, run_dir=tmp_path / "killed")
    assert first.returncode != 0  # SIGKILL at step 3: the step-2 checkpoint is the newest
    again = helpers.run_entry("train.py", *common, "run_name=killed", env=env,
                              run_dir=tmp_path / "killed")  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from s3://litforge/fsdp/killed/step-00000002.ckpt" in again.stdout
    expected = _final_state(CheckpointStore("s3://litforge/fsdp/ref"), 6, tmp_path / "a")
    got = _final_state(CheckpointStore("s3://litforge/fsdp/killed"), 6, tmp_path / "b")
    assert expected.keys() == got.keys() == {"state_dict", "optimizer_0"}
    assert_bitwise_equal(expected, got)


def _losses(run_dir: Path) -> list[float]:
    rows = (run_dir / "csv" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    column = header.index("train/loss_step")
    return [float(r.split(",")[column]) for r in rows[1:] if r.split(",")[column]]


@pytest.mark.slow  # two 2-process runs: ~1 min
def test_fsdp_trains_as_ddp_does(tmp_path):
    same = [*GPT, "trainer.max_steps=8", "trainer.log_every_n_steps=1", "model.net.dropout=0.0"]
    ddp = helpers.run_entry("train.py", *same, "trainer=ddp", run_dir=tmp_path / "ddp")
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    fsdp = helpers.run_entry("train.py", *same, "trainer=fsdp", run_dir=tmp_path / "fsdp")
    assert fsdp.returncode == 0, fsdp.stderr[-3000:]
    expected, got = _losses(tmp_path / "ddp"), _losses(tmp_path / "fsdp")
    assert len(expected) == len(got) == 8
    # The same maths in another order (sharded reduce-scatter vs all-reduce): float32 noise.
    assert got == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow  # two 2-process runs: ~45 s
def test_a_preempted_fsdp_run_saves_its_shards_and_the_same_command_resumes(tmp_path):
    args = [*FSDP, "trainer.max_steps=6", "checkpoint.every_n_train_steps=100"]
    notice = ["+callbacks.sig._target_=tests.helpers.SignalAtStep", "+callbacks.sig.step=3"]
    first = helpers.run_entry("train.py", *args, *notice, run_dir=tmp_path / "run")
    assert first.returncode != 0
    assert "SIGTERM received: saved a checkpoint at step 3" in first.stderr
    saved = tmp_path / "run" / "checkpoints" / "step-00000003.ckpt"
    assert {"__0_0.distcp", "__1_0.distcp"} <= {p.name for p in saved.iterdir()}
    again = helpers.run_entry("train.py", *args, run_dir=tmp_path / "run")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from {saved}" in again.stdout
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["global_step"] == 6
