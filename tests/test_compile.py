"""compile.enabled=true: the model compiled in place (aot_eager here: torch.compile's
wrapping without generated code), checkpoints without `_orig_mod.`, loading both ways."""

from __future__ import annotations

import json

import pytest
import torch

from litforge import build, compiling
from litforge.errors import ConfigError
from litforge.evaluation import evaluate
from litforge.training import train
from tests.helpers import TINY_GPT, run_entry

COMPILED = ["compile.enabled=true", "compile.backend=aot_eager"]
SHORT = ["trainer=cpu", "trainer.max_steps=4", "checkpoint.every_n_train_steps=2", "test=false",
         "trainer.limit_val_batches=1"]  # fmt: skip


def test_blocks_compile_in_place_with_the_same_output(make_cfg):
    cfg = make_cfg(*TINY_GPT, *COMPILED, "model.net.dropout=0.0")
    module = build.build_module(cfg)
    x = torch.randint(128, (2, cfg.data.block_size))
    expected = module(x)
    keys = list(module.state_dict())
    assert compiling.compile_in_place(module, compiling.options(cfg)) == cfg.model.net.n_layer
    assert all(b._compiled_call_impl is not None for b in module.net.blocks)
    torch.testing.assert_close(module(x), expected)
    assert list(module.state_dict()) == keys  # no _orig_mod. anywhere


def test_a_compiled_run_evaluates_and_resumes_uncompiled_and_back(make_cfg, tmp_path):
    run = tmp_path / "run"
    train(make_cfg(*TINY_GPT, *SHORT, *COMPILED, "run_name=c", run_dir=run))
    ckpt = run / "checkpoints" / "step-00000004.ckpt"
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    assert state and not any("_orig_mod" in k for k in state)
    evaluated = evaluate(make_cfg(*TINY_GPT, "trainer=cpu", f"ckpt_path={ckpt}",
                                  config_name="eval", run_dir=tmp_path / "eval"))  # fmt: skip
    assert evaluated["test/loss"] > 0
    # Resumed uncompiled, then compiled again.
    uncompiled = train(
        make_cfg(*TINY_GPT, *SHORT, "trainer.max_steps=6", "run_name=c", run_dir=run)
    )
    assert uncompiled["global_step"] == 6
    again = train(make_cfg(*TINY_GPT, *SHORT, *COMPILED, "trainer.max_steps=8", "run_name=c",
                           run_dir=run))  # fmt: skip
    assert again["global_step"] == 8


# Slow for CI time: make test keeps compiling in place (the tests above) and FSDP's sharded
# runs and checkpoints (tests/e2e/test_fsdp.py).
@pytest.mark.slow
def test_compiled_under_fsdp_after_sharding(tmp_path):
    # A subprocess: an FSDP process group in the test process would hold its port.
    result = run_entry("train.py", *TINY_GPT, *SHORT, *COMPILED, "trainer=fsdp",
                       "trainer.devices=1", run_dir=tmp_path / "run")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "compile: 1 Block blocks with torch.compile(backend='aot_eager'"
        in result.stdout + result.stderr
    )
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["global_step"] == 4


def test_a_backend_that_does_not_exist_is_one_line(make_cfg):
    with pytest.raises(
        ConfigError,
        match=r"^compile.backend='tensorrt-ish' is not a torch.compile backend; use one of: .*aot_eager",
    ):
        train(make_cfg(*TINY_GPT, *SHORT, "compile.enabled=true", "compile.backend=tensorrt-ish"))


def test_inductor_without_a_c_compiler_is_one_line(make_cfg, monkeypatch):
    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match=r"needs a C compiler \(cc, gcc or clang\) on PATH"):
        train(make_cfg(*TINY_GPT, *SHORT, "compile.enabled=true"))


@pytest.mark.slow
def test_inductor_trains(make_cfg, tmp_path, monkeypatch):
    from litforge.compile_cache.archive import KEY_ENV
    from litforge.compile_cache.local_files import archive_name

    monkeypatch.setenv(KEY_ENV, "a-test-key-of-32-characters-0001")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    metrics = train(make_cfg(*TINY_GPT, *SHORT, "compile.enabled=true"))
    assert metrics["global_step"] == 4
    # The config's compile cache found the run's checkpoints: none to fetch yet, one saved.
    record = json.loads((tmp_path / "run" / "run.json").read_text())["compile_cache"]
    name = archive_name(torch.device("cpu"))
    assert record["archive"] == f"{tmp_path / 'run' / 'checkpoints'}/{name}"
    assert record["fetched_files"] == 0 and "fx_graph_hit" in record, record
    assert (tmp_path / "run" / "checkpoints" / name).is_file()


@pytest.mark.slow
def test_exact_resume_with_compile_on(tmp_path):
    from tests.checkpointing.test_resume_exact import GPT, killed_and_resumed_equals_uninterrupted

    killed_and_resumed_equals_uninterrupted(tmp_path, [*GPT, *COMPILED], kill_at=6, last=14)
