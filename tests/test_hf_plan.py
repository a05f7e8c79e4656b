"""Planned before paying: a 7B-shaped Llama from its config alone, built on the meta device
by the memory budget and the plan (full fine-tuning does not fit a 24 GB card; LoRA in
bfloat16 with gradient checkpointing does), and QLoRA: one line on CPU, a GPU test."""

from __future__ import annotations

import inspect
import json
import re
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from litforge.build import build_module  # noqa: E402
from litforge.commands import budget, plan  # noqa: E402
from litforge.errors import ConfigError  # noqa: E402
from litforge.training import train  # noqa: E402
from tests.helpers import csv_rows  # noqa: E402
from tests.hf_models import llama_7b_config, tiny_llama  # noqa: E402

LORA = "model.net.lora={r:8,alpha:16,dropout:0.0,target_modules:[q_proj,v_proj]}"


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(the tiny Llama, whose 300-token tokenizer fits any larger embedding; the 7B
    config's directory; a text file)."""
    root = tmp_path_factory.mktemp("shapes")
    text = root / "textwrap.txt"
    text.write_text(inspect.getsource(textwrap) * 2)
    return tiny_llama(root / "tiny"), llama_7b_config(root / "llama-7b"), text


def seven_b(shapes, *more: str) -> list[str]:
    tiny, big, text = shapes
    return ["experiment=hf_finetune", f"model.net.pretrained={big}", f"data.tokenizer={tiny}",
            f"data.path={text}", "data.block_size=512", "data.batch_size=4", *more]  # fmt: skip


def test_a_config_alone_builds_on_the_meta_device_but_does_not_train(make_cfg, shapes):
    cfg = make_cfg(*seven_b(shapes))
    with torch.device("meta"):
        module = build_module(cfg)
    assert sum(p.numel() for p in module.parameters()) == 6_738_415_616
    assert module.shard_unit.__name__ == "LlamaDecoderLayer"
    with pytest.raises(ConfigError, match=r"has config.json but no weights .* python -m "
                                          r"litforge.budget and python -m litforge.plan need "
                                          r"only the config"):  # fmt: skip
        train(cfg)


def gib(line: str, column: int) -> float:
    """A size column of a budget row, in GiB."""
    sizes = re.findall(r"(\d+(?:\.\d+)?) (GiB|MiB|KiB|B)\b", line)
    value, unit = sizes[column]
    return float(value) / {"GiB": 1, "MiB": 2**10, "KiB": 2**20, "B": 2**30}[unit]


@pytest.mark.slow
def test_7b_full_fine_tuning_does_not_fit_24gb_and_lora_in_bf16_does(capsys, shapes):
    budget.main([*seven_b(shapes), "--compare", "--device-memory", "24GB"])
    full = capsys.readouterr().out
    rows = [line for line in full.splitlines() if re.match(r"(32|bf16-\w+) ", line)]
    assert len(rows) == 6 and all(line.endswith("does not fit") for line in rows), full
    bf16_true = next(line for line in rows if line.startswith("bf16-true") and " on " in line)
    # 2 bytes per weight and gradient, AdamW's two moments in bf16: 8 bytes x 6.74e9.
    assert gib(bf16_true, 0) == pytest.approx(6_738_415_616 * 2 / 2**30, rel=0.01)
    assert gib(bf16_true, 2) == pytest.approx(2 * gib(bf16_true, 0), rel=0.01)

    budget.main([*seven_b(shapes), "precision=bf16-true", "model.gradient_checkpointing=true",
                 LORA, "--device-memory", "24GB"])  # fmt: skip
    lora = capsys.readouterr().out
    row = next(line for line in lora.splitlines() if line.startswith("bf16-true"))
    assert row.endswith(" fits"), lora
    # 4.19M adapter parameters (r=8 on q and v of 32 layers) take gradients and state.
    assert gib(row, 1) == pytest.approx(4_194_304 * 2 / 2**30, rel=0.01)
    assert gib(row, 4) < 22.4

    # QLoRA: the layers' weights in NF4 (4.127 bits), embeddings and head in float32.
    budget.main([*seven_b(shapes), "precision=bf16-mixed", "model.gradient_checkpointing=true",
                 "model.net.quantize=4bit", LORA, "--device-memory", "24GB"])  # fmt: skip
    qlora = capsys.readouterr().out
    row = next(line for line in qlora.splitlines() if line.startswith("bf16-mixed"))
    layers, rest = 32 * 202_375_168, 2 * 32_000 * 4096  # each decoder layer's Linear weights
    assert gib(row, 0) == pytest.approx((layers * 4.127 / 8 + rest * 4) / 2**30, rel=0.02)
    assert row.endswith(" fits"), qlora

    # The plan: full fine-tuning needs 4 L4s with FSDP sharding the states; LoRA fits one.
    plan.main([*seven_b(shapes), "trainer.max_steps=1000", "--cards", "L4", "--json"])
    options = json.loads(capsys.readouterr().out)["options"]
    fitting = {o["count"]: o["setting"]["sharded"] for o in options if o["fits"]}
    assert fitting == {4: True}, options  # effective batch 4: 8 GPUs would idle
    plan.main([*seven_b(shapes), "trainer.max_steps=1000", LORA, "--cards", "L4", "--json"])
    one_l4 = json.loads(capsys.readouterr().out)["options"][0]
    assert one_l4["count"] == 1 and one_l4["fits"], one_l4
    assert one_l4["setting"]["precision"] == "bf16-true" and not one_l4["setting"]["sharded"]


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["model.net.quantize=4bit", LORA], r"model.net.quantize=4bit \(QLoRA\) needs a CUDA GPU"),
        (["model.net.quantize=4bit"], r"4-bit weights do not train; .* set model.net.lora too"),
        (["model.net.quantize=8bit", LORA], r"model.net.quantize='8bit' is not one of: 4bit"),
    ],
)
def test_qlora_settings_are_one_line_before_training(make_cfg, shapes, overrides, said):
    tiny, _, text = shapes
    if torch.cuda.is_available() and "needs a CUDA" in said:
        pytest.skip("this machine has CUDA")
    cfg = make_cfg("experiment=hf_finetune", f"model.net.pretrained={tiny}",
                   f"data.path={text}", *overrides)  # fmt: skip
    with pytest.raises(ConfigError, match=said):
        build_module(cfg)


def test_qlora_planned_on_the_meta_device_counts_4_bit_weights(make_cfg, shapes):
    from litforge.hf.quantize import NF4_BYTES_PER_WEIGHT, PLANNED_BYTES

    tiny, _, text = shapes
    cfg = make_cfg("experiment=hf_finetune", f"model.net.pretrained={tiny}", f"data.path={text}",
                   "model.net.quantize=4bit", LORA)  # fmt: skip
    with torch.device("meta"):  # as the budget and the plan build it: no CUDA needed
        module = build_module(cfg)
    marked = {n for n, p in module.named_parameters() if hasattr(p, PLANNED_BYTES)}
    linear = {f"{n}.weight" for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)}
    adapters = {n for n in linear if "lora_" in n}
    head = {n for n in linear if n.endswith("lm_head.weight")}
    assert marked == linear - adapters - head and len(marked) == 2 * 7  # q k v o gate up down
    assert {getattr(dict(module.named_parameters())[n], PLANNED_BYTES) for n in marked} == {
        NF4_BYTES_PER_WEIGHT
    }


@pytest.mark.gpu
def test_qlora_trains_adapters_over_4_bit_weights(make_cfg, shapes, tmp_path):
    bnb = pytest.importorskip("bitsandbytes")
    tiny, _, text = shapes
    train(make_cfg(
        "experiment=hf_finetune", f"model.net.pretrained={tiny}", f"data.path={text}",
        "trainer=gpu", "precision=bf16-mixed", "model.net.quantize=4bit", LORA,
        "model.optimizer.lr=1e-2", "trainer.max_steps=30", "trainer.val_check_interval=10",
        "test=false",
    ))  # fmt: skip
    # On the CPU, LoRA without quantisation: 5.649, 5.627, 5.623 at steps 10, 20, 30.
    losses = [float(r["val/loss"]) for r in csv_rows(tmp_path / "run") if r.get("val/loss")]
    assert len(losses) == 3 and losses == sorted(losses, reverse=True), losses
    assert losses[-1] < losses[0] - 0.01
    module = build_module(make_cfg("experiment=hf_finetune", f"model.net.pretrained={tiny}",
                                   f"data.path={text}", "model.net.quantize=4bit", LORA))  # fmt: skip
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in module.modules())
    (saved,) = (tmp_path / "run").rglob("step-00000030.ckpt")
    state = torch.load(saved, map_location="cpu", weights_only=False)["state_dict"]
    assert state and all("lora_" in key for key in state)
