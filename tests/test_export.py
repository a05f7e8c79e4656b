"""`python -m litforge.export`: a checkpoint is data (nothing it names is built), the
destination is never silently replaced, and an interrupted export leaves nothing half
written; LoRA settings, moved bases and GPT-2/Qwen2 layers, through export."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from litforge.errors import ConfigError  # noqa: E402
from litforge.export import MARKER, export  # noqa: E402
from litforge.training import train  # noqa: E402
from tests.helpers import ROOT  # noqa: E402
from tests.hf_models import tiny_causal_lm  # noqa: E402
from tests.test_hf import LORA as LORAS  # noqa: E402
from tests.test_hf import hf  # noqa: E402

LORA = LORAS[0]


@pytest.fixture(scope="module")
def lora_ckpt(llama, text_file, tmp_path_factory) -> Path:
    from litforge.cli import compose

    run = tmp_path_factory.mktemp("lora_run")
    train(compose(hf(llama, text_file, LORA, "trainer.max_steps=2", "model.optimizer.lr=1e-2",
                     "checkpoint.every_n_train_steps=2"), run))  # fmt: skip
    return next(run.rglob("step-00000002.ckpt"))


def payloads(victim: Path) -> list[dict]:
    """Model records naming callables that Hydra's blocklist lets through."""
    victim_dir = victim.parent / "victim_dir"
    victim_dir.mkdir(exist_ok=True)
    (victim_dir / "keep.txt").write_text("keep")
    path = {"_target_": "pathlib.Path", "_args_": [str(victim)]}
    return [
        {"_target_": "pathlib.Path.write_text", "_args_": [path, "import os\n"]},
        {"_target_": "shutil.rmtree", "_args_": [str(victim_dir)]},
        {"_target_": "builtins.open", "_args_": [str(victim), "w"]},
        {"_target_": "os.makedirs", "_args_": [str(victim) + ".d"]},
        {
            "_target_": "litforge.hf.HFCausalLM",
            "pretrained": None,
            "net": {"_target_": "pathlib.Path.touch", "_args_": [path]},
        },  # fmt: skip
    ]


def test_a_checkpoint_naming_code_builds_nothing_and_is_one_line(llama, text_file, lora_ckpt,
                                                                  tmp_path):  # fmt: skip
    victim = tmp_path / "site" / "evil.pth"
    victim.parent.mkdir()
    for number, record in enumerate(payloads(victim)):
        good = torch.load(lora_ckpt, weights_only=True)
        good["litforge_model"] = record
        bad = tmp_path / f"bad{number}.ckpt"
        torch.save(good, bad)
        out = tmp_path / f"out{number}"
        with pytest.raises(ConfigError) as refused:
            export(str(bad), out, hf(llama, text_file, LORA))
        assert "\n" not in str(refused.value)
        assert "ckpt_path=" in str(refused.value), refused.value
        assert not out.exists() and not list(tmp_path.glob(".*partial*"))
        assert not victim.exists() and not Path(str(victim) + ".d").exists()
        assert (tmp_path / "site" / "victim_dir" / "keep.txt").read_text() == "keep"


@pytest.mark.slow
def test_the_command_refuses_a_code_record_in_one_line(llama, text_file, lora_ckpt, tmp_path):
    victim = tmp_path / "evil.pth"
    good = torch.load(lora_ckpt, weights_only=True)
    good["litforge_model"] = payloads(victim)[0]
    torch.save(good, tmp_path / "bad.ckpt")
    result = subprocess.run(
        [sys.executable, "-m", "litforge.export", str(tmp_path / "bad.ckpt"),
         str(tmp_path / "out"), *hf(llama, text_file, LORA)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "holds a pathlib.Path.write_text checkpoint" in lines[0], lines
    assert not victim.exists() and not (tmp_path / "out").exists()


def test_export_never_replaces_a_directory_silently(llama, text_file, lora_ckpt, tmp_path):
    overrides = hf(llama, text_file, LORA)
    before = (llama / "model.safetensors").read_bytes()
    for flag in (False, True):
        with pytest.raises(ConfigError, match=r"is the base model's directory|is not empty"):
            export(str(lora_ckpt), llama, overrides, overwrite=flag)
    assert (llama / "model.safetensors").read_bytes() == before
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"OUT=.*taken is not empty; .*--overwrite"):
        export(str(lora_ckpt), taken, overrides)
    assert (taken / "config.json").read_text() == "{}"
    export(str(lora_ckpt), taken, overrides, overwrite=True)
    assert json.loads((taken / MARKER).read_text())["base"] == str(llama)
    assert (taken / "tokenizer.json").is_file()
    mode = (taken / "model.safetensors").stat().st_mode & 0o777
    assert mode & 0o044, oct(mode)  # readable by others as the user's other files are
    assert not list(tmp_path.glob(".taken*"))


def test_a_destination_that_cannot_be_made_is_one_line(llama, text_file, lora_ckpt, tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match=r"OUT=.* cannot be written .*a_file is not a directory"):
        export(str(lora_ckpt), tmp_path / "a_file" / "out", hf(llama, text_file, LORA))


def test_a_read_only_destination_is_one_line(llama, text_file, lora_ckpt, read_only_dir):
    with pytest.raises(ConfigError, match=r"OUT=.* cannot be written"):
        export(str(lora_ckpt), read_only_dir / "out", hf(llama, text_file, LORA))
    assert not list(read_only_dir.iterdir())


@pytest.mark.slow
def test_a_killed_export_leaves_no_half_model(llama, text_file, lora_ckpt, tmp_path):
    out = tmp_path / "merged"
    partial = tmp_path / ".merged.litforge-partial"
    process = subprocess.Popen(
        [sys.executable, "-m", "litforge.export", str(lora_ckpt), str(out),
         *hf(llama, text_file, LORA)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not partial.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not out.exists() or (out / MARKER).is_file()  # nothing, or all of it
    export(str(lora_ckpt), out, hf(llama, text_file, LORA), overwrite=True)  # a rerun finishes
    assert (out / MARKER).is_file() and (out / "tokenizer.json").is_file()
    assert not partial.exists()


def test_misspelt_lora_settings_are_one_line(make_cfg, llama, text_file):
    with pytest.raises(ConfigError, match=r"model.net.lora.alpah is not a LoRA setting \(did "
                                          r"you mean alpha\?\)"):  # fmt: skip
        train(
            make_cfg(*hf(llama, text_file, "model.net.lora={r:4,alpah:64,target_modules:[q_proj]}"))
        )
    with pytest.raises(ConfigError, match=r"model.net.lora.bogus is not a LoRA setting"):
        train(
            make_cfg(*hf(llama, text_file, "model.net.lora={r:4,bogus:1,target_modules:[q_proj]}"))
        )


def test_a_peft_setting_reaches_peft(make_cfg, llama, text_file):
    from litforge.build import build_module

    module = build_module(make_cfg(*hf(llama, text_file, "model.net.lora={r:4,use_rslora:true,"
                                                         "target_modules:[q_proj]}")))  # fmt: skip
    assert module.net.model.peft_config["default"].use_rslora is True


def test_a_bit_identical_base_elsewhere_is_the_same_base(llama, text_file, lora_ckpt, tmp_path,
                                                         caplog):  # fmt: skip
    from litforge.cli import compose
    from litforge.evaluation import evaluate

    moved = tmp_path / "moved"
    shutil.copytree(llama, moved)
    with caplog.at_level(logging.INFO, logger="litforge"):
        metrics = evaluate(compose(hf(moved, text_file, LORA, f"ckpt_path={lora_ckpt}"),
                                   tmp_path / "eval", config_name="eval"))  # fmt: skip
    assert metrics["test/loss"] > 0
    assert "the base model moved" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "targets"), [("gpt2", "[c_attn]"), ("qwen2", "[q_proj,v_proj]")])
def test_gpt2_and_qwen2_fine_tune_and_export(make_cfg, text_file, tmp_path, kind, targets):
    from transformers import AutoModelForCausalLM

    from litforge.build import build_module
    from litforge.checkpointing import checkpoint_file

    base = tiny_causal_lm(tmp_path / kind, kind)
    overrides = hf(base, text_file, f"model.net.lora={{r:4,alpha:8,target_modules:{targets}}}")
    cfg = make_cfg(*overrides, "trainer.max_steps=3", "model.optimizer.lr=1e-2",
                   "checkpoint.every_n_train_steps=3")  # fmt: skip
    train(cfg)
    ckpt = next((tmp_path / "run").rglob("step-00000003.ckpt"))
    out = export(str(ckpt), tmp_path / "exported", overrides)
    module = build_module(cfg)
    checkpoint_file.load_weights(module, cfg.model, str(ckpt), tmp_path / "downloaded")
    ids = torch.randint(0, 200, (2, 16), generator=torch.Generator().manual_seed(0))
    module.eval()
    with torch.no_grad():
        ours = module(ids)
        theirs = AutoModelForCausalLM.from_pretrained(out).eval()(input_ids=ids).logits
        original = AutoModelForCausalLM.from_pretrained(base).eval()(input_ids=ids).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(original, ours)  # the adapters changed the model
