"""precision=fp8 on a real CUDA card (`pytest -m gpu`): trains where the card has FP8
tensor cores, refuses in one line where it has none, and matmul-bench times float8."""

from __future__ import annotations

import json

import pytest
import torch

from litforge.planning import matmul_bench
from litforge.precision.fp8.cards import refusal
from tests.helpers import TINY_GPT, run_entry

pytestmark = pytest.mark.gpu

GPT = [*TINY_GPT, "precision=fp8", "precision.fp8_min_dim=16", "trainer.accelerator=gpu",
       "trainer.devices=1", "trainer.max_steps=4", "trainer.limit_val_batches=2",
       "+trainer.limit_test_batches=2"]  # fmt: skip


def _card_line() -> str | None:
    return refusal(torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))


def test_fp8_trains_on_this_card_compiled_or_refuses_in_one_line(tmp_path):
    done = run_entry("train.py", *GPT, "compile.enabled=true", run_dir=tmp_path / "run")
    line = _card_line()
    if line is not None:  # no FP8 tensor cores: the one line, before training
        assert done.returncode == 2 and f"error: {line}" in done.stderr
        return
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fp8: 4 of 5 linear layers" in done.stdout + done.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["global_step"] == 4 and metrics["test/loss"] < 10


def test_matmul_bench_times_float8_on_this_card(capsys):
    if _card_line() is not None:
        pytest.skip(_card_line())
    assert matmul_bench.main(["--fp8", "4096,4096,4096", "--seconds", "0.05", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["fp8"]
    assert row["bf16_ms"] > 0 and row["fp8_ms"] > 0  # eager float8: the casts are unfused
