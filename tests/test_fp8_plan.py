"""`litforge plan` and `matmul-bench` know fp8: the per-layer speed by matrix shape (a
stand-in fitted to torchao's published H100 figures), which cards have FP8, the plan's
fp8 setting, and float8 against bf16 timed per shape."""

from __future__ import annotations

import json

import pytest
import torch

from litforge.commands import budget
from litforge.planning import matmul_bench
from litforge.planning.fp8_speed import PUBLISHED, layer_speedup, linear_uses, step_factor
from litforge.planning.hardware import CARDS, find_card
from litforge.planning.plan import search
from litforge.planning.plan.fp8 import fp8_factor, uses_of
from litforge.precision.fp8.layers import choose
from litforge_examples.nets.gpt import GPT
from tests.helpers import TINY_GPT

WIDE_GPT = ["experiment=gpt_char", "data.block_size=32", "data.batch_size=4", "model.net.n_layer=1",
            "model.net.n_head=16", "model.net.n_embd=2048", "trainer=cpu"]  # fmt: skip


def test_the_stand_in_reproduces_torchaos_published_shapes_and_grows_with_them():
    for m, k, n, published in PUBLISHED:
        assert layer_speedup(m, k, n) == pytest.approx(published, abs=0.005)
    sizes = [layer_speedup(s, s, s) for s in (512, 1024, 2048, 4096, 8192, 16384)]
    assert sizes == sorted(sizes) and sizes[0] < 1 < sizes[-1] < 1 / 0.607


def test_only_cards_with_fp8_tensor_cores_have_a_float8_peak_and_an_fp8_plan():
    fp8 = {c.name for c in CARDS if "float8" in c.peak_tflops}
    assert fp8 == {"H200 NVL", "H200", "H100 NVL", "H100 PCIe", "H100", "L40S", "L4", "RTX 4090"}
    for card in CARDS:  # float8 twice bfloat16 dense wherever both are listed
        if "float8" in card.peak_tflops:
            assert card.peak_tflops["float8"] == pytest.approx(2 * card.peak_tflops["bfloat16"],
                                                               rel=0.02)  # fmt: skip
    assert ("fp8", "bf16-mixed") in search.precisions(find_card("H100"))
    assert all(p != "fp8" for p, _ in search.precisions(find_card("A100")))
    assert all(p != "fp8" for p, _ in search.precisions(find_card("T4")))


def test_each_linear_layer_is_read_with_its_rows_per_sample():
    with torch.device("meta"):
        net = GPT(vocab_size=128, block_size=64, n_layer=1, n_head=16, n_embd=2048, dropout=0.0)
    picked = {x.name for x in choose(net, 2048) if x.fp8}
    assert picked == {"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc",
                      "blocks.0.mlp.proj"}  # lm_head: 2048x128 is under 2048  # fmt: skip
    uses = linear_uses(net, torch.zeros(1, 64, dtype=torch.long), picked)  # a batch of one
    assert {u.name: u.rows_per_sample for u in uses} == {name: 64 for name in
                                                         [*picked, "lm_head"]}  # fmt: skip
    flops = sum(u.flops_per_sample() for u in uses)  # Linear layers only
    factor = step_factor(uses, micro_batch=8, model_flops=flops)
    shares = {u.name: u.flops_per_sample() / flops for u in uses}
    expected = shares["lm_head"] + sum(
        shares[u.name] / layer_speedup(8 * 64, u.in_features, u.out_features)
        for u in uses if u.fp8
    )  # fmt: skip
    assert factor == pytest.approx(expected)
    assert step_factor([u for u in uses if not u.fp8], 8, flops) == 1.0


def test_the_plan_times_fp8_by_its_layers_against_bf16(make_cfg):
    tiny = budget.from_config(make_cfg(*TINY_GPT, "trainer=cpu"))
    assert fp8_factor(tiny, 8, 1e9) == 1.0  # every layer under fp8_min_dim: as bf16
    wide = budget.from_config(make_cfg(*WIDE_GPT))
    wide.attention = "fused"
    assert sum(u.fp8 for u in uses_of(wide)) == 4
    work = search.Work(8, 6.0 * 2048 * 2048 * 12 * 32 * 1.2, 0.0)
    found = search.settings(wide, work, find_card("H100"), 1, 0.35, 0.9)
    by = {s.precision: s for s in found if not s.checkpointing}
    assert by["fp8"].step_s == pytest.approx(
        by["bf16-mixed"].step_s * fp8_factor(wide, by["fp8"].micro_batch, work.model_flops)
    )
    assert by["fp8"].memory == by["bf16-mixed"].memory  # measured as bf16-mixed


def test_matmul_bench_times_float8_against_bf16_per_shape(capsys):
    assert matmul_bench.main(["--fp8", "64,64,256", "--seconds", "0.01", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["fp8"]
    assert (row["m"], row["k"], row["n"]) == (64, 64, 256)
    assert row["bf16_ms"] > 0 and row["fp8_ms"] > 0
    assert row["speedup"] == pytest.approx(row["bf16_ms"] / row["fp8_ms"])
    assert row["predicted"] == pytest.approx(layer_speedup(64, 64, 256))


def test_matmul_bench_refuses_a_shape_float8_cannot_run_in_one_line(capsys):
    assert matmul_bench.main(["--fp8", "64,65,16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --fp8='64,65,16' must be auto or shapes M,K,N separated by ';', each "
                   "a multiple of 16, e.g. 4096,4096,4096;8192,4096,14336"]  # fmt: skip


def test_the_gpu_benchmarks_fp8_rows_run_on_the_cpu():
    from benchmarks import gpu

    cpu = torch.device("cpu")
    assert gpu.fp8_skip_reason(cpu) is None  # torchao is installed (litforge[all])
    shape = gpu.SMOKE[0]
    assert gpu.throughput(shape, cpu, gpu.FP8_EAGER, steps=1, warmup=1)["s_per_step"] > 0
    flops = gpu.flops_per_step(shape, cpu)
    assert 0 < gpu.fp8_predicted(shape, flops) < 1  # 64-wide layers: float8 costs more
    assert gpu.peak_tflops("fp8 +compile", 100.0) == 100.0


def test_the_budget_measures_an_fp8_model_with_its_float8_layers(make_cfg):
    bf16 = budget.from_config(make_cfg(*TINY_GPT, "trainer=cpu", "precision=bf16-mixed"))
    fp8 = budget.from_config(make_cfg(*TINY_GPT, "trainer=cpu", "precision=fp8",
                                      "precision.fp8_min_dim=16"))  # fmt: skip
    plain, float8 = bf16.row("bf16-mixed", False), fp8.row("bf16-mixed", False)
    assert float8.weights == plain.weights and float8.optimizer == plain.optimizer  # float32
    # torchao's layers save their float8 casts beside what bf16 saves: other bytes.
    assert float8.activations != plain.activations
