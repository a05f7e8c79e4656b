"""The throughput callback in real (short) training runs, its FLOP count, its bad input."""

from __future__ import annotations

import csv
import logging
import math
import re
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.loggers import CSVLogger

from litforge import build
from litforge.errors import ConfigError
from litforge.monitors.throughput import ThroughputMFU, resolve_available_flops
from litforge.planning.flops import step_flops, token_count
from litforge.training import train
from tests.helpers import TINY_GPT

# Rates from the 4th logging point on (steps 2, 4, ... with a window of two points).
SHORT = [
    "trainer=cpu",
    "trainer.max_steps=8",
    "trainer.log_every_n_steps=2",
    "callbacks.throughput.window_size=2",
    "checkpoint=none",
    "test=false",
]
CPU_LINE = "throughput: MFU and peak memory are GPU-only"


def _rows(run_dir: Path, key: str = "train/samples") -> list[dict[str, float]]:
    """metrics.csv's rows that have `key`, as numbers."""
    with open(run_dir / "csv" / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    return [{k: float(v) for k, v in row.items() if v} for row in rows if row.get(key)]


def _meta_flops(cfg, batch_size: int) -> int:
    """Lightning's recipe: measure_flops of a forward and backward of the configured module
    built on the meta device, on a batch of that size."""
    with torch.device("meta"):
        module = build.build_module(cfg)
        if "block_size" in cfg.data:
            x = torch.randint(cfg.model.net.vocab_size, (batch_size, cfg.data.block_size))
        else:
            x = torch.randn(batch_size, 1, 8, 8)
    return measure_flops(module, lambda: module(x), lambda y: y.sum())


def _cpu_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(CPU_LINE)]


@pytest.mark.parametrize("model", ["cnn", "gpt"])
def test_short_run_logs_rates_into_the_csv(model, make_cfg, tmp_path, caplog):
    """The CNN on the CPU as it comes; the GPT with a peak given, so with an MFU."""
    if model == "cnn":
        overrides = ["experiment=digits_cnn"]
    else:
        overrides = [*TINY_GPT, "callbacks.throughput.available_flops=1e11"]
    cfg = make_cfg(*overrides, *SHORT)
    with caplog.at_level(logging.INFO, logger="litforge"):
        train(cfg)
    assert len(_cpu_lines(caplog)) == (1 if model == "cnn" else 0)

    rows = _rows(tmp_path / "run")
    batch = cfg.data.batch_size
    assert [r["train/batches"] for r in rows] == [2, 4, 6, 8]  # every log_every_n_steps
    assert all(r["train/samples"] == r["train/batches"] * batch for r in rows)
    rated = [r for r in rows if "train/device/samples_per_sec" in r]
    assert len(rated) == 3  # the window holds two logging points from the second on
    flops_per_sample = _meta_flops(cfg, batch) / batch
    for r in rated:
        assert r["train/device/samples_per_sec"] > 0
        assert r["train/device/batches_per_sec"] * batch == pytest.approx(
            r["train/device/samples_per_sec"]
        )
        # The logged FLOP/s are the measured FLOPs of a step at the logged rate.
        assert r["train/device/flops_per_sec"] / r["train/device/samples_per_sec"] == pytest.approx(
            flops_per_sample, rel=1e-9
        )
        if model == "cnn":
            assert "train/device/mfu" not in r  # no peak for a CPU
            assert "train/device/items_per_sec" not in r and "train/lengths" not in r
        else:
            assert r["train/device/mfu"] == pytest.approx(r["train/device/flops_per_sec"] / 1e11)
            tokens = cfg.data.block_size
            assert r["train/lengths"] == r["train/samples"] * tokens
            assert r["train/device/items_per_sec"] == pytest.approx(
                r["train/device/samples_per_sec"] * tokens
            )


@pytest.mark.parametrize("checkpointing", [False, True])
def test_count_on_meta_copy_of_a_real_module_equals_lightnings_recipe(make_cfg, checkpointing):
    cfg = make_cfg(
        *TINY_GPT, f"model.gradient_checkpointing={checkpointing}", "model.net.dropout=0.1"
    )
    module = build.build_module(cfg)
    x = torch.randint(128, (8, cfg.data.block_size))
    rng = torch.get_rng_state()
    counted = step_flops(module, x)
    assert torch.equal(torch.get_rng_state(), rng)  # no dropout mask was drawn
    assert all(p.grad is None for p in module.parameters())  # the real weights untouched
    assert counted == _meta_flops(cfg, 8) > 0
    if checkpointing:  # the blocks' forward recomputed in the backward pass is counted
        plain = make_cfg(*TINY_GPT, "model.net.dropout=0.1")
        assert counted > _meta_flops(plain, 8)


def test_real_cpu_count_misses_fused_attention(make_cfg):
    """Why the count runs on meta tensors: torch 2.13's FlopCounterMode counts nothing for
    CPU's fused attention kernel (pytorch/pytorch#195460), which SDPA takes without dropout."""
    cfg = make_cfg(*TINY_GPT)  # dropout 0
    module = build.build_module(cfg)
    B, T, C = 8, cfg.data.block_size, cfg.model.net.n_embd
    x = torch.randint(128, (B, T))
    real = measure_flops(module, lambda: module(x), lambda y: y.sum())
    attention = 3 * 4 * B * T * T * C  # QK^T and AV, forward and the backward's two each
    assert step_flops(module, x) == _meta_flops(cfg, B) == real + attention


def test_token_count_for_token_ids_only():
    ids, images = torch.zeros(4, 16, dtype=torch.long), torch.zeros(4, 1, 8, 8)
    assert token_count((ids, ids)) == 64
    assert token_count({"input_ids": ids, "labels": ids}) == 64
    assert token_count((images, torch.zeros(4, dtype=torch.long))) is None
    assert token_count((torch.zeros(4, 16), ids)) is None  # floating features, not ids
    assert token_count("text") is None


def test_peak_from_our_table_by_precision():
    assert resolve_available_flops("NVIDIA H200", "bf16-mixed", True, None) == 989.4e12
    assert resolve_available_flops("NVIDIA H100 NVL", "16-mixed", True, None) == 835.5e12
    assert resolve_available_flops("NVIDIA A100-SXM4-80GB", "32-true", True, None) == 156e12
    assert resolve_available_flops("NVIDIA A100-SXM4-80GB", "32-true", False, None) == 19.5e12
    # No TF32 on a V100: float32 matmuls run at the float32 peak whatever torch allows.
    assert resolve_available_flops("Tesla V100-SXM2-32GB", "32-true", True, None) == 15.7e12
    assert resolve_available_flops("NVIDIA B200", "bf16-mixed", True, 2.25e15) == 2.25e15
    assert resolve_available_flops("NVIDIA H200", "bf16-mixed", True, 0.0) is None
    assert resolve_available_flops(None, "32-true", False, None) is None


@pytest.mark.parametrize(
    ("device", "precision", "why"),
    [
        ("NVIDIA B200", "bf16-mixed", r"'NVIDIA B200' is not in litforge.planning.hardware.CARDS;"),
        ("NVIDIA RTX A6000", "bf16-mixed", r"'NVIDIA RTX A6000' is not in "),
        ("Tesla T4", "bf16-mixed", "litforge.planning.hardware has no bfloat16 peak for the T4"),
        ("NVIDIA H200", "64-true", "litforge.planning.hardware has no 64-true peak for the H200"),
    ],
)
def test_unknown_card_or_dtype_trains_with_one_warning_and_no_mfu(device, precision, why, caplog):
    with caplog.at_level(logging.WARNING, "litforge"):
        assert resolve_available_flops(device, precision, True, None) is None
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("throughput: no MFU: ") and "\n" not in message
    assert re.search(why, message)
    assert "set callbacks.throughput.available_flops to the card's dense peak" in message


@pytest.mark.parametrize("value", [-1, -1e12, math.nan, math.inf, "1e15", True])
def test_bad_available_flops(value):
    with pytest.raises(
        ConfigError,
        match=r"^callbacks\.throughput\.available_flops=.* must be a number of FLOP/s per device >= 0",
    ):
        ThroughputMFU(available_flops=value)


@pytest.mark.parametrize("value", [1, 0, 2.5, "3"])
def test_bad_window_size(value):
    with pytest.raises(
        ConfigError, match=r"^callbacks\.throughput\.window_size=.* must be an integer >= 2"
    ):
        ThroughputMFU(window_size=value)


def test_bad_value_stops_the_run_before_training(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match="available_flops=-5"):
        train(make_cfg("trainer=cpu", "callbacks.throughput.available_flops=-5"))
    assert not (tmp_path / "run" / "csv").exists()


@pytest.mark.gpu
def test_mfu_on_this_gpu_uses_the_corrected_table(make_cfg, tmp_path):
    from litforge.planning.hardware import current_card

    card = current_card()
    assert card is not None, torch.cuda.get_device_name(0)
    cfg = make_cfg(
        *TINY_GPT, "trainer=gpu", "precision=bf16-mixed", "trainer.max_steps=40",
        "trainer.log_every_n_steps=5", "checkpoint=none", "test=false",
    )  # fmt: skip
    train(cfg)
    rows = [r for r in _rows(tmp_path / "run") if "train/device/mfu" in r]
    assert rows
    peak = card.peak_flops("bfloat16")
    for r in rows:
        assert r["train/device/mfu"] == pytest.approx(r["train/device/flops_per_sec"] / peak)
    memory = _rows(tmp_path / "run", "train/device/peak_memory_gib")
    assert memory and 0 < memory[-1]["train/device/peak_memory_gib"] < card.usable_gib


def test_mfu_is_palms_with_checkpointing_and_hfu_counts_the_recomputation(make_cfg, tmp_path):
    """PaLM (Chowdhery et al. 2022, appendix B): 6N + 12*L*H*Q*T FLOPs per token, N the
    parameters (the position table does no FLOPs), whether or not the blocks recompute."""
    overrides = [*TINY_GPT, "callbacks.throughput.available_flops=1e11", "model.net.dropout=0.1"]
    cfg = make_cfg(*overrides, "model.gradient_checkpointing=true", *SHORT)
    train(cfg)
    net, T = cfg.model.net, cfg.data.block_size
    module = build.build_module(cfg)
    n = sum(p.numel() for p in module.parameters()) - T * net.n_embd  # less the wpe table
    palm = 6 * n + 12 * net.n_layer * net.n_head * (net.n_embd // net.n_head) * T
    recomputing = _meta_flops(cfg, cfg.data.batch_size)
    plain = _meta_flops(make_cfg(*overrides), cfg.data.batch_size)
    assert recomputing > 1.1 * plain
    rated = [r for r in _rows(tmp_path / "run") if "train/device/mfu" in r]
    assert rated
    for r in rated:
        per_token = r["train/device/flops_per_sec"] / r["train/device/items_per_sec"]
        assert per_token == pytest.approx(palm, rel=0.01)
        assert r["train/device/mfu"] == pytest.approx(r["train/device/flops_per_sec"] / 1e11)
        assert r["train/device/hfu"] == pytest.approx(r["train/device/mfu"] * recomputing / plain)


class _SlowData(torch.utils.data.Dataset):
    """Each sample takes 100 ms to load: a data-bound run (its step computes for ~1 ms, and
    a first step on a loaded machine for a few hundred)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        import time

        time.sleep(0.1)
        return torch.randn(256), torch.tensor(i % 2)


class _Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        layers = [m for _ in range(4) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())]
        self.layer = torch.nn.Sequential(*layers, torch.nn.Linear(256, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("slow", [True, False])
def test_data_wait_share_is_logged_and_a_stall_is_explained_once(tmp_path, caplog, slow):
    # The fast data is batches made in advance (batch_size=None: nothing to collate), so a
    # fetch takes microseconds against the step's milliseconds on a loaded machine too;
    # collating 256 samples one by one took as long as the step. 2048 rows a batch: with
    # 256, Lightning's own work between two batches (counted as waiting) reached half of
    # a ~5 ms step in one window on a loaded CI machine; at 2048 it stays under 1%.
    batches = [(torch.randn(2048, 256), torch.randint(2, (2048,))) for _ in range(8)]
    # Windows of 4 steps: the median of 3 or 4 waits, so one pause of the process (a garbage
    # collection in a long test session) cannot make a window's share.
    trainer = L.Trainer(
        accelerator="cpu", max_steps=16, log_every_n_steps=4, logger=CSVLogger(tmp_path),
        callbacks=[ThroughputMFU(window_size=2, data_wait_warn=0.5)], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, "litforge"):
        loader = (
            torch.utils.data.DataLoader(_SlowData(), batch_size=4)
            if slow
            else torch.utils.data.DataLoader(batches, batch_size=None)
        )
        trainer.fit(_Tiny(), loader)
    shares = [r["train/data_wait_share"] for r in _csv_rows(tmp_path, "train/data_wait_share")]
    assert len(shares) == 4
    warned = [
        r.getMessage() for r in caplog.records if "waits for the next batch" in r.getMessage()
    ]
    if slow:
        assert min(shares) > 0.5, shares
        (message,) = warned
        assert "(the DataLoader has num_workers=0, pin_memory=False" in message
        assert "Try data.num_workers=N" in message
    else:
        assert max(shares) < 0.5 and not warned, shares


def _csv_rows(root: Path, key: str) -> list[dict[str, float]]:
    (path,) = root.rglob("metrics.csv")
    with open(path, newline="") as file:
        return [
            {k: float(v) for k, v in r.items() if v} for r in csv.DictReader(file) if r.get(key)
        ]


def test_bad_data_wait_warn():
    for value in (0, 1.5, "x", True):
        with pytest.raises(ConfigError, match=r"^callbacks\.throughput\.data_wait_warn="):
            ThroughputMFU(data_wait_warn=value)
