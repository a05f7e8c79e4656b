"""precision=fp8: torchao's float8 Linear layers, run on this CPU through torch._scaled_mm."""

from __future__ import annotations

import json
import re
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from litforge import training as train_entry
from litforge.build import build_module
from litforge.errors import ConfigError
from litforge.precision.fp8.cards import refusal
from litforge.precision.fp8.layers import choose, summary
from litforge.precision.fp8.run import check_card
from litforge.precision.fp8.training import Float8Precision, convert, float8_count, is_float8
from litforge.validation.checks import check_config
from litforge_examples.nets.gpt import GPT
from tests.checkpointing.test_resume_exact import assert_bitwise_equal
from tests.helpers import TINY_GPT
from tests.test_bad_input import assert_one_line_error, run

# Every Linear of the tiny GPT is 32 wide or more and a multiple of 16: all but lm_head
# (precision=fp8's fp8_skip) go to FP8.
FP8_GPT = [*TINY_GPT, "precision=fp8", "precision.fp8_min_dim=16", "trainer=cpu"]
QUICK = ["trainer.limit_val_batches=1", "test=false", "logger=csv", "model.scheduler=null",
         "trainer.deterministic=true", "checkpoint.every_n_train_steps=2"]  # fmt: skip


def _net() -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, 256, bias=False),  # goes to FP8
        nn.GELU(),
        nn.Linear(256, 64),  # goes to FP8 (bias counted in its parameters)
        nn.Linear(64, 10),  # 10 is not a multiple of 16
        nn.Linear(10, 16),
    )


def test_the_filter_keeps_small_unaligned_and_named_layers_in_bf16():
    layers = choose(_net(), min_dim=64)
    assert [(x.name, x.fp8) for x in layers] == [("0", True), ("2", True), ("3", False),
                                                  ("4", False)]  # fmt: skip
    assert layers[2].reason == "64x10 is not a multiple of 16"
    assert [x.fp8 for x in choose(_net(), min_dim=128)] == [False] * 4  # 64 < 128
    assert choose(_net(), min_dim=128)[0].reason == "64x256 is under precision.fp8_min_dim=128"
    skipped = choose(_net(), min_dim=16, skip=["2"])
    assert skipped[1].reason == "named in precision.fp8_skip ('2')" and skipped[0].fp8
    line = summary(layers, "tensorwise")
    assert line.startswith(
        "fp8: 2 of 4 linear layers (32,832 of 33,658 parameters) train in FP8 (tensorwise); "
        "bf16: 3 (64x10 is not a multiple of 16), 4 ("
    )
    assert "\n" not in line


@pytest.mark.parametrize(
    ("name", "capability", "instead"),
    [
        ("Tesla V100-SXM2-16GB", (7, 0), "precision=16-mixed"),
        ("Tesla T4", (7, 5), "precision=16-mixed"),
        ("NVIDIA A100-SXM4-80GB", (8, 0), "precision=bf16-mixed"),
        ("NVIDIA A10", (8, 6), "precision=bf16-mixed"),
        ("NVIDIA GeForce RTX 3090", (8, 6), "precision=bf16-mixed"),
        ("Tesla P100-PCIE-16GB", (6, 0), "precision=32"),
    ],
)
def test_a_card_without_fp8_tensor_cores_gets_one_line_naming_it(name, capability, instead):
    line = refusal(name, capability)
    assert line is not None and "\n" not in line
    assert name in line and f"{capability[0]}.{capability[1]}" in line
    assert line.endswith(f"use {instead}" if instead != "precision=16-mixed" else
                         "use precision=16-mixed (no bfloat16 before Ampere either)")  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(line)):
        check_card(on_gpu=True, card=lambda: (name, capability))


@pytest.mark.parametrize(
    ("name", "capability"),
    [("NVIDIA L4", (8, 9)), ("NVIDIA GeForce RTX 4090", (8, 9)), ("NVIDIA H100 80GB HBM3", (9, 0)),
     ("NVIDIA H200", (9, 0)), ("NVIDIA B200", (10, 0)), ("NVIDIA GeForce RTX 5090", (12, 0))],
)  # fmt: skip
def test_ada_hopper_and_newer_run_fp8(name, capability):
    assert refusal(name, capability) is None
    check_card(on_gpu=True, card=lambda: (name, capability))


def test_on_cpu_the_card_is_not_asked():
    def no_card() -> tuple[str, tuple[int, int]]:
        raise AssertionError("a CPU run asked for a CUDA card")

    check_card(on_gpu=False, card=no_card)


class _Plain(L.LightningModule):
    """A user's own LightningModule, nothing of litforge's."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = ((self.net(x).float() - x) ** 2).mean()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def test_a_plain_lightning_trainer_trains_in_fp8_with_the_plugin(tmp_path):
    torch.manual_seed(0)
    module = _Plain()
    before = module.net[0].weight.detach().clone()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 32)), 16)
    plugin = Float8Precision(min_dim=16, device="cpu")
    trainer = L.Trainer(accelerator="cpu", max_steps=4, plugins=[plugin], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(module, data)
    assert float8_count(module) == 2 and all(is_float8(m) for m in module.net[::2])
    assert plugin.announce().startswith("fp8: 2 of 2 linear layers")
    assert trainer.precision == "bf16-mixed"
    weight = module.net[0].weight
    assert type(weight) is nn.Parameter and weight.dtype == torch.float32  # plain weights
    assert torch.isfinite(weight).all() and not torch.equal(weight, before)
    assert torch.isfinite(trainer.callback_metrics["loss"])


def test_fp8_and_bf16_weights_load_into_each_other():
    torch.manual_seed(0)
    plain = GPT(vocab_size=128, block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
    fp8 = GPT(vocab_size=128, block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
    convert(fp8, min_dim=16)
    assert float8_count(fp8) == 5  # qkv, proj, fc, proj, lm_head
    assert fp8.state_dict().keys() == plain.state_dict().keys()
    fp8.load_state_dict(plain.state_dict())  # strict: the same names and shapes
    for (name, a), b in zip(plain.state_dict().items(), fp8.state_dict().values(), strict=True):
        assert torch.equal(a, b) and a.dtype == b.dtype, name
    idx = torch.randint(0, 128, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        near = (fp8(idx).float() - plain(idx).float()).abs().max()
    assert 0 < near < 0.5  # float8 rounding, not another model
    plain.load_state_dict(fp8.state_dict())


def test_a_model_already_sharded_is_refused_in_one_line():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
                                         world_size=1)  # fmt: skip
    try:
        net = nn.Sequential(nn.Linear(32, 32))
        fully_shard(net, mesh=init_device_mesh("cpu", (1,)))
        with pytest.raises(ConfigError, match=r"^precision=fp8: the model is already sharded"):
            convert(net, min_dim=16)
    finally:
        torch.distributed.destroy_process_group()


def test_build_module_converts_before_compile_and_the_optimizer(make_cfg):
    module = build_module(make_cfg(*FP8_GPT, "compile.enabled=true", "compile.backend=eager"))
    assert float8_count(module) == 4  # lm_head stays bf16 (precision.fp8_skip=[lm_head])
    assert all(is_float8(m) for m in module.net.blocks[0].modules() if isinstance(m, nn.Linear))
    assert module.net.blocks[0]._compiled_call_impl is not None  # compiled after, in place
    bf16 = build_module(make_cfg(*TINY_GPT, "precision=bf16-mixed"))
    assert float8_count(bf16) == 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("precision=fp8 precision.fp8=fast", "precision.fp8='fast' is invalid; must be one of off, tensorwise, rowwise"),
        ("precision=fp8 precision.fp8_min_dim=8", "precision.fp8_min_dim=8 is invalid; must be an integer >= 16"),
        ("precision=fp8 precision.fp8_skip=lm_head", "precision.fp8_skip='lm_head' is invalid; must be a list"),
        ("precision=32 +precision.fp8=tensorwise",
         "precision.fp8=tensorwise needs trainer.precision=bf16-mixed (float8 matmuls inside "
         "bfloat16 autocast), not 32; pick precision=fp8 or precision=fp8-rowwise"),
    ],
)  # fmt: skip
def test_bad_values_of_the_fp8_keys_are_one_line(make_cfg, override, message):
    # The value as typed or as its repr: the config check and the schema word it apiece.
    pattern = re.escape(message).replace("'", "'?")
    with pytest.raises(ConfigError, match=pattern):
        check_config(make_cfg(*TINY_GPT, *override.split()))


def test_train_refuses_a_bad_fp8_key_in_one_line(tmp_path, capfd):
    code, out, err = run(train_entry.main, [*FP8_GPT, "precision.fp8_min_dim=0"], tmp_path / "r",
                         capfd)  # fmt: skip
    assert_one_line_error(code, out, err, "precision.fp8_min_dim=0")


def _checkpoint(run_dir: Path, step: int) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step-{step:08d}.ckpt", weights_only=True)


def test_an_fp8_run_trains_and_resumes_bitwise(tmp_path, capfd):
    """Four steps straight, against two then two more after a restart."""
    reference = tmp_path / "reference"
    code, out, err = run(train_entry.main, [*FP8_GPT, *QUICK, "trainer.max_steps=4"], reference,
                         capfd)  # fmt: skip
    assert code == 0, err[-3000:]
    assert re.search(r"fp8: 4 of 5 linear layers \([\d,]+ of [\d,]+ parameters\) train in FP8 "
                     r"\(tensorwise\)", out + err)  # fmt: skip
    assert "(runs bf16-mixed + float8 in 4 Linear layers)" in out + err  # the budget's row
    finals = json.loads((reference / "metrics.json").read_text())
    assert finals["precision_requested"] == "fp8"
    assert finals["precision_effective"] == "bf16-mixed + float8 in 4 Linear layers"
    resumed = tmp_path / "resumed"
    code, _, err = run(train_entry.main, [*FP8_GPT, *QUICK, "trainer.max_steps=2"], resumed, capfd)
    assert code == 0, err[-3000:]
    code, out, err = run(train_entry.main, [*FP8_GPT, *QUICK, "trainer.max_steps=4"], resumed,
                         capfd)  # fmt: skip
    assert code == 0, err[-3000:]
    assert "resuming from" in out + err
    expected, got = _checkpoint(reference, 4), _checkpoint(resumed, 4)
    assert_bitwise_equal(expected["state_dict"], got["state_dict"], "state_dict")
    assert_bitwise_equal(expected["optimizer_states"], got["optimizer_states"], "optimizer")
    weights = expected["state_dict"]
    assert all(t.dtype == torch.float32 for t in weights.values())  # plain weights


def test_an_fp8_checkpoint_starts_a_bf16_run_and_back(tmp_path, capfd):
    """restore.mode=finetune: the fp8 run's weights into a bf16 run, and its into fp8."""
    fp8 = tmp_path / "fp8"
    code, _, err = run(train_entry.main, [*FP8_GPT, *QUICK, "trainer.max_steps=2"], fp8, capfd)
    assert code == 0, err[-3000:]
    source = fp8 / "checkpoints" / "step-00000002.ckpt"
    bf16 = tmp_path / "bf16"
    finetune = [f"restore.from={source}", "restore.mode=finetune", "trainer.max_steps=2"]
    args = [*TINY_GPT, "trainer=cpu", "precision=bf16-mixed", *QUICK, *finetune]
    code, _, err = run(train_entry.main, args, bf16, capfd)
    assert code == 0, err[-3000:]
    back = tmp_path / "back"
    finetune[0] = f"restore.from={bf16 / 'checkpoints' / 'step-00000002.ckpt'}"
    code, _, err = run(train_entry.main, [*FP8_GPT, *QUICK, *finetune], back, capfd)
    assert code == 0, err[-3000:]
    started = _checkpoint(bf16, 2)["state_dict"]
    assert started.keys() == _checkpoint(back, 2)["state_dict"].keys()
    assert all(torch.isfinite(t).all() for t in _checkpoint(back, 2)["state_dict"].values())
