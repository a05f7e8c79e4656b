"""An out-of-memory error in fit: one block with the phase, the budget, the options, its
own exit status, and no checkpoint of the step it broke."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from litforge.exits import explained
from litforge.monitors.out_of_memory import OutOfMemory
from litforge.training import train
from tests.helpers import ROOT, TINY_GPT

RUN = [*TINY_GPT, "trainer=cpu", "trainer.max_steps=6", "checkpoint.every_n_train_steps=2",
       "trainer.val_check_interval=3", "test=false"]  # fmt: skip


def oom_at(phase: str) -> list[str]:
    return ["+callbacks.oom._target_=tests.helpers.OutOfMemoryAt", f"+callbacks.oom.phase={phase}"]


@pytest.mark.parametrize(
    ("phase", "said"),
    [
        ("forward", "in the forward at optimizer step 2"),
        ("backward", "in the backward at optimizer step 2"),
        ("optimizer", "in the optimizer step at optimizer step 2"),
        ("validation", "in the validation at optimizer step 3"),
        ("between", "in the hooks between steps at optimizer step 2"),
        ("sanity", "in the sanity validation at optimizer step 0"),
    ],
)
def test_each_phase_is_named_with_the_budget_and_options(make_cfg, tmp_path, phase, said):
    with pytest.raises(OutOfMemory) as stop, explained():
        train(make_cfg(*RUN, *oom_at(phase)))
    message = str(stop.value)
    assert stop.value.exit_code == 66
    lines = message.splitlines()
    assert lines[0].startswith(f"out of memory {said} (epoch 0): CUDA out of memory.")
    assert lines[1] == "  device: cpu (no device memory limit of its own)"
    assert lines[2].startswith("  memory budget: precision=32-true checkpointing=off weights=")
    assert lines[3] == "  options, in order:"
    assert lines[4].startswith("    data.batch_size=4 trainer.accumulate_grad_batches=2")
    assert any(line.startswith("    precision=bf16-mixed: ") for line in lines)
    # Only complete checkpoints, none of the step that broke.
    saved = sorted(p.name for p in (tmp_path / "run").rglob("*.ckpt"))
    assert all("step-00000002" in name for name in saved)


def test_the_command_prints_one_block_and_exits_66(tmp_path):
    result = subprocess.run(
        [sys.executable, "train.py", *RUN, *oom_at("backward"),
         f"hydra.run.dir={tmp_path / 'run'}", "callbacks.memory_budget.snapshot=true"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 66, result.stderr
    err = result.stderr
    assert "Traceback" not in err
    assert "error: out of memory in the backward at optimizer step 2" in err
    assert "snapshot needs CUDA; no snapshot on CPU" in err + result.stdout


def test_without_the_budget_it_still_names_the_phase(make_cfg):
    with pytest.raises(OutOfMemory, match=r"^out of memory in the forward") as stop, explained():
        train(make_cfg(*RUN, *oom_at("forward"), "~callbacks.memory_budget"))
    assert "memory budget: not measured (callbacks.memory_budget is off)" in str(stop.value)


def test_called_from_a_notebook_the_error_carries_the_block(make_cfg):
    # train() itself raises torch's error; the block rides along as its note, and
    # `explained()` (what the entry point wraps a recipe in) raises the block instead.
    with pytest.raises(torch.OutOfMemoryError) as raw:
        train(make_cfg(*RUN, *oom_at("forward")))
    assert any(n.startswith("out of memory in the forward") for n in raw.value.__notes__)


def test_without_the_callback_the_error_is_torchs_own(make_cfg):
    with pytest.raises(torch.OutOfMemoryError) as raw, explained():
        train(make_cfg(*RUN, *oom_at("forward"), "~callbacks.out_of_memory"))
    assert not getattr(raw.value, "__notes__", None)
