"""precision=fp8 with FSDP2 over two CPU processes (gloo), and with torch.compile (inductor)
and gradient checkpointing: each a real training run, so in the slow tier."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT, TINY_GPT, run_entry

FP8 = ["precision=fp8", "precision.fp8_min_dim=16", "trainer.limit_val_batches=2",
       "trainer.limit_test_batches=2", "logger=csv"]  # fmt: skip


def test_torchao_is_imported_only_when_fp8_is_asked_for():
    code = (
        "import sys; from litforge import compose; from litforge.build import build_module; "
        f"build_module(compose({[*TINY_GPT, 'precision=bf16-mixed']!r}, 'run', 'train')); "
        "print('torchao' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.slow
def test_fsdp2_shards_an_fp8_gpt_over_two_processes(tmp_path):
    run_dir = tmp_path / "fsdp"
    done = run_entry("train.py", *TINY_GPT, "model.net.n_layer=2", *FP8, "trainer=fsdp",
                     "trainer.max_steps=4", "checkpoint.every_n_train_steps=2", run_dir=run_dir)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fp8: 8 of 9 linear layers" in done.stdout + done.stderr
    assert "ShardedStrategy" in done.stdout + done.stderr
    assert (run_dir / "checkpoints" / "step-00000004.ckpt").is_dir()  # sharded: a directory
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["global_step"] == 4 and metrics["test/loss"] < 10


@pytest.mark.slow
def test_fp8_compiles_with_inductor_under_gradient_checkpointing(tmp_path):
    run_dir = tmp_path / "compiled"
    done = run_entry("train.py", *TINY_GPT, *FP8, "trainer=cpu", "compile.enabled=true",
                     "model.gradient_checkpointing=true", "trainer.max_steps=3", run_dir=run_dir)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "fp8: 4 of 5 linear layers" in out and "compile: 1 Block blocks" in out
    assert json.loads((run_dir / "metrics.json").read_text())["global_step"] == 3
