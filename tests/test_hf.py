"""Hugging Face causal LMs as litforge models: a tiny random-weight Llama built from a
transformers config and saved with save_pretrained, with a tokenizer trained here on
Python's own text; no download anywhere."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from litforge.errors import ConfigError  # noqa: E402
from litforge.training import train  # noqa: E402
from tests.helpers import csv_rows  # noqa: E402
from tests.hf_models import tiny_llama  # noqa: E402


def hf(llama: Path, text_file: Path, *more: str) -> list[str]:
    return ["experiment=hf_finetune", f"model.net.pretrained={llama}", f"data.tokenizer={llama}",
            f"data.path={text_file}", "trainer=cpu", "test=false", *more]  # fmt: skip


def test_a_saved_model_fine_tunes_and_its_loss_falls(make_cfg, llama, text_file, tmp_path):
    metrics = train(make_cfg(*hf(llama, text_file, "trainer.max_steps=30", "model.optimizer.lr=1e-2",
                                 "trainer.val_check_interval=30", "trainer.log_every_n_steps=10")))  # fmt: skip
    assert metrics["global_step"] == 30
    assert metrics["val/loss"] < torch.log(torch.tensor(300.0)).item() - 0.5  # below uniform
    # FLOPs counted on fake meta tensors (the Llama code reads values on plain meta ones).
    rates = [r for r in csv_rows(tmp_path / "run") if r.get("train/device/flops_per_sec")]
    assert rates and all(float(r["train/device/flops_per_sec"]) > 0 for r in rates)


def test_gradient_checkpointing_uses_the_models_own_switch(make_cfg, llama, text_file):
    from litforge.build import build_module

    module = build_module(make_cfg(*hf(llama, text_file, "model.gradient_checkpointing=true")))
    assert module.net.model.is_activation_checkpointing
    assert module.shard_unit.__name__ == "LlamaDecoderLayer"


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("model.net.pretrained=/nonexistent/llama", "model.net.pretrained=/nonexistent/llama "
                                                    "does not exist: give a directory written by save_pretrained()"),
        ("data.path=/nonexistent.txt", "data.path=/nonexistent.txt: no such file"),
    ],
)  # fmt: skip
def test_a_missing_model_or_file_is_one_line(make_cfg, llama, text_file, override, said):
    with pytest.raises(ConfigError, match=said):
        train(make_cfg(*hf(llama, text_file, override)))


def test_a_tokenizer_larger_than_the_embedding_is_one_line(make_cfg, llama, text_file, tmp_path):
    bigger = tiny_llama(tmp_path / "bigger", vocab=400)
    with pytest.raises(ConfigError, match=r"data.tokenizer=.* has \d+ tokens, but model.net's "
                                          r"embedding has \d+ rows"):  # fmt: skip
        train(make_cfg(*hf(llama, text_file, f"data.tokenizer={bigger}")))


@pytest.mark.slow
def test_fsdp_shards_the_decoder_layers(llama, text_file, tmp_path):
    from tests.helpers import run_entry

    result = run_entry("train.py", *hf(llama, text_file, "trainer=fsdp", "trainer.devices=2",
                                       "trainer.max_steps=3", "checkpoint.every_n_train_steps=3"),
                       run_dir=tmp_path / "fsdp")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    shards = next(p for p in (tmp_path / "fsdp").rglob("step-00000003.ckpt") if p.is_dir())
    assert len(list(shards.glob("*.distcp"))) == 2


LORA = ["model.net.lora={r:4,alpha:8,dropout:0.0,target_modules:[q_proj,v_proj]}"]


def test_lora_trains_only_adapters_and_checkpoints_hold_only_them(make_cfg, llama, text_file,
                                                                   tmp_path):  # fmt: skip
    from litforge.build import build_module

    module = build_module(make_cfg(*hf(llama, text_file, *LORA)))
    trainable = [n for n, p in module.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    train(make_cfg(*hf(llama, text_file, *LORA, "trainer.max_steps=4",
                       "checkpoint.every_n_train_steps=4")))  # fmt: skip
    saved = torch.load(next((tmp_path / "run").rglob("step-00000004.ckpt")), weights_only=True)
    assert saved["state_dict"] and all("lora_" in k for k in saved["state_dict"])
    assert saved["litforge_base_model"]["pretrained"] == str(llama)
    assert len(saved["litforge_base_model"]["sha256"]) == 64


def test_a_lora_run_resumes_exactly(make_cfg, llama, text_file, tmp_path):
    common = [*LORA, "run_name=lora", "checkpoint.every_n_train_steps=3",
              "trainer.val_check_interval=100", "model.optimizer.lr=1e-2"]  # fmt: skip
    train(make_cfg(*hf(llama, text_file, *common, "trainer.max_steps=6"), run_dir=tmp_path / "a"))
    train(make_cfg(*hf(llama, text_file, *common, "trainer.max_steps=3"), run_dir=tmp_path / "b"))
    train(make_cfg(*hf(llama, text_file, *common, "trainer.max_steps=6"), run_dir=tmp_path / "b"))
    straight, resumed = (
        torch.load(next((tmp_path / d).rglob("step-00000006.ckpt")), weights_only=True)
        for d in ("a", "b")
    )
    assert straight["state_dict"].keys() == resumed["state_dict"].keys()
    for name, tensor in straight["state_dict"].items():
        assert torch.equal(tensor, resumed["state_dict"][name]), name
    for a, b in zip(straight["optimizer_states"][0]["state"].values(),
                    resumed["optimizer_states"][0]["state"].values(), strict=True):  # fmt: skip
        assert torch.equal(a["exp_avg"], b["exp_avg"])


def test_export_merges_the_adapters_into_a_directory_transformers_loads(make_cfg, llama, text_file,
                                                                         tmp_path):  # fmt: skip
    from transformers import AutoModelForCausalLM

    from litforge.build import build_module
    from litforge.checkpointing import checkpoint_file
    from litforge.export import export

    cfg = make_cfg(*hf(llama, text_file, *LORA, "trainer.max_steps=4", "model.optimizer.lr=1e-2",
                       "checkpoint.every_n_train_steps=4"))  # fmt: skip
    train(cfg)
    ckpt = next((tmp_path / "run").rglob("step-00000004.ckpt"))
    out = export(str(ckpt), tmp_path / "exported", hf(llama, text_file, *LORA))
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    module = build_module(cfg)
    checkpoint_file.load_weights(module, cfg.model, str(ckpt), tmp_path / "downloaded")
    ids = torch.randint(0, 200, (2, 16), generator=torch.Generator().manual_seed(0))
    module.eval()
    with torch.no_grad():
        ours = module(ids)
        theirs = AutoModelForCausalLM.from_pretrained(out).eval()(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(llama).eval()(input_ids=ids).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(base, ours)  # the adapters changed the model

    # eval.py: the base from model.net.pretrained, the adapters from the checkpoint, samples.
    from litforge.evaluation import evaluate

    metrics = evaluate(make_cfg(*hf(llama, text_file, *LORA), f"ckpt_path={ckpt}",
                                "sample.prompt=def", "sample.max_new_tokens=12",
                                config_name="eval", run_dir=tmp_path / "eval"))  # fmt: skip
    assert math.isfinite(metrics["test/loss"])
    text = (tmp_path / "eval" / "sample.txt").read_text()
    assert text.startswith("def") and len(text) > len("def")  # the tiny model's random bytes


def test_lora_target_modules_that_match_nothing_list_the_candidates(make_cfg, llama, text_file):
    with pytest.raises(ConfigError, match=(
        r"model.net.lora.target_modules=\['query'\]: query match no module of the model; its "
        r"layers LoRA adapts are: down_proj, embed_tokens, gate_proj, k_proj, lm_head, o_proj, "
        r"q_proj, up_proj, v_proj$"
    )):  # fmt: skip
        train(make_cfg(*hf(llama, text_file, "model.net.lora={target_modules:[query]}")))


def test_adapters_resume_only_onto_the_base_they_were_trained_on(make_cfg, text_file, tmp_path):
    base = tiny_llama(tmp_path / "base")
    common = [*LORA, "run_name=rebased", "checkpoint.every_n_train_steps=2"]
    train(make_cfg(*hf(base, text_file, *common, "trainer.max_steps=2")))
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)  # other weights under the same directory
    other = AutoModelForCausalLM.from_config(AutoModelForCausalLM.from_pretrained(base).config)
    other.save_pretrained(base)
    with pytest.raises(ConfigError, match=r"holds LoRA adapters trained on .*base \(sha256 "
                                          r"[0-9a-f]{12}\), but model.net.pretrained=.* is "
                                          r"another model"):  # fmt: skip
        train(make_cfg(*hf(base, text_file, *common, "trainer.max_steps=4")))
    from litforge.evaluation import evaluate

    (saved,) = (tmp_path / "run").rglob("step-00000002.ckpt")
    with pytest.raises(ConfigError, match=r"holds LoRA adapters trained on .* another model"):
        evaluate(make_cfg(*hf(base, text_file, *LORA), f"ckpt_path={saved}", config_name="eval",
                          run_dir=tmp_path / "eval"))  # fmt: skip
