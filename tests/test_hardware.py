"""The card table: names CUDA reports, dense peaks where Lightning's table is wrong, sizes."""

from __future__ import annotations

import warnings

import pytest
import torch
from lightning.fabric.utilities import throughput as lightning_throughput

from litforge.errors import ConfigError
from litforge.planning.hardware import CARDS, GIB, find_card, parse_memory, peak_dtype

# torch.cuda.get_device_name() on each card -> our table's entry
CUDA_NAMES = {
    "NVIDIA H100 80GB HBM3": "H100",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA L4": "L4",
    "NVIDIA L40S": "L40S",
    "NVIDIA A100-SXM4-80GB": "A100",
    "NVIDIA A100-SXM4-40GB": "A100 40GB",
    "NVIDIA A100 80GB PCIe": "A100",
    "NVIDIA A10": "A10",
    "NVIDIA GeForce RTX 4090": "RTX 4090",
    "Tesla V100-SXM2-32GB": "V100 32GB",
    "Tesla V100-SXM2-16GB": "V100",
    "Tesla V100-PCIE-16GB": "V100 PCIe",
    "Tesla V100-PCIE-32GB": "V100 PCIe 32GB",
    "Tesla V100S-PCIE-32GB": "V100S PCIe",
    "Tesla T4": "T4",
}


@pytest.mark.parametrize(("device_name", "card"), CUDA_NAMES.items())
def test_find_card_on_cuda_device_names(device_name, card):
    assert find_card(device_name).name == card


@pytest.mark.parametrize("device_name", ["NVIDIA L40", "NVIDIA B200", "NVIDIA A10G", "cpu", ""])
def test_cards_not_in_the_table(device_name):
    assert find_card(device_name) is None


def test_user_spellings():
    assert find_card("h100 pcie").name == "H100 PCIe"
    assert find_card("a100-40gb").name == "A100 40GB"
    assert find_card("rtx-4090").name == "RTX 4090"


def test_dense_peaks_of_the_cards_the_issue_names():
    peak = {c.name: c.peak_tflops for c in CARDS}
    assert peak["H200"]["bfloat16"] == 989.4 and peak["H200"]["tf32"] == 494.7
    assert peak["H200 NVL"]["bfloat16"] == 835.5
    assert peak["H100"]["bfloat16"] == 989.4 and peak["H100"]["float32"] == 67.0
    assert peak["H100 PCIe"]["bfloat16"] == 756.0 and peak["H100 PCIe"]["tf32"] == 378.0
    assert peak["H100 NVL"]["bfloat16"] == 835.5
    assert peak["A100"]["bfloat16"] == 312.0 and peak["A100"]["tf32"] == 156.0
    assert peak["L40S"]["bfloat16"] == 362.05 and peak["L4"]["bfloat16"] == 121.0
    # Ada: FP16/BF16 tensor cores with FP32 accumulate run at twice the FP32 rate.
    assert peak["RTX 4090"]["bfloat16"] == 165.2 and peak["RTX 4090"]["float32"] == 82.6
    assert "bfloat16" not in peak["V100"] and "tf32" not in peak["T4"]
    # V100 datasheet: PCIe 14 TFLOP/s float32 and 112 fp16 tensor; SXM2 15.7 and 125.
    assert peak["V100 PCIe"] == {"float32": 14.0, "float16": 112.0}
    assert peak["V100"] == {"float32": 15.7, "float16": 125.0}
    assert find_card("NVIDIA H200").peak_flops("bfloat16") == pytest.approx(989.4e12)


def _lightning_peak(monkeypatch, device_name: str) -> tuple[float | None, str]:
    """Lightning's get_available_flops (bf16) for a CUDA device that reports `device_name`
    (only the name is faked: nothing else of CUDA is used), and what it warned."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: device_name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        peak = lightning_throughput.get_available_flops(torch.device("cuda"), torch.bfloat16)
    return peak, " ".join(str(w.message) for w in caught)


def test_lightning_table_bug_we_work_around(monkeypatch):
    """pytorch-lightning #21677, still in 2.6.6: no peak at all for the names an H200 reports
    (its entries are keyed "h200 sxm1"/"h200 nvl1"), and the H100 NVL's sparse two-card
    figure, 2.4x the dense peak of one card."""
    for name in ("NVIDIA H200", "NVIDIA H200 NVL"):
        peak, warned = _lightning_peak(monkeypatch, name)
        assert peak is None and warned.startswith(f"FLOPs not found for {name!r}")
        assert find_card(name).peak_flops("bfloat16") in (989.4e12, 835.5e12)
    assert _lightning_peak(monkeypatch, "NVIDIA H100 NVL") == (1978.8e12, "")
    assert find_card("NVIDIA H100 NVL").peak_flops("bfloat16") == pytest.approx(835.5e12)
    # Where Lightning's entry is right, ours agrees.
    assert _lightning_peak(monkeypatch, "NVIDIA H100 80GB HBM3")[0] == pytest.approx(
        find_card("NVIDIA H100 80GB HBM3").peak_flops("bfloat16")
    )


@pytest.mark.parametrize(
    ("precision", "tf32", "dtype"),
    [
        ("32-true", False, "float32"),
        ("32-true", True, "tf32"),
        ("bf16-mixed", True, "bfloat16"),
        ("bf16-true", False, "bfloat16"),
        ("16-mixed", False, "float16"),
        ("16-true", False, "float16"),
        ("64-true", False, None),
    ],
)
def test_peak_dtype_follows_precision(precision, tf32, dtype):
    assert peak_dtype(precision, tf32) == dtype


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("80GiB", 80 * GIB),
        ("24 GB", 24 * 10**9),
        ("1.5TiB", int(1.5 * 2**40)),
        ("16000MiB", 16000 * 2**20),
        ("512kb", 512_000),
        ("1024", 1024),
        ("H100", int(79.1 * GIB)),  # what CUDA reports on an 80 GB card, not 80 GiB
        ("NVIDIA A100-SXM4-40GB", int(39.4 * GIB)),
    ],
)
def test_parse_memory(text, size):
    assert parse_memory(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-5GiB", "80 GiBs", "B200"])
def test_parse_memory_errors_name_the_key(text):
    with pytest.raises(
        ConfigError, match=r"^--budget-memory=.* is neither a size .* nor a card name"
    ):
        parse_memory(text, key="--budget-memory")


@pytest.mark.parametrize("text", ["0", "0GiB", "0.0"])
def test_no_memory_is_refused(text):
    with pytest.raises(ConfigError, match=r"is no memory to fit in; give a size above 0"):
        parse_memory(text)


def test_fits_uses_the_memory_a_process_can_allocate():
    usable = {c.name: c.usable_gib for c in CARDS}
    assert usable["H100"] == usable["A100"] == 79.1 and usable["H200"] == 139.8
    assert usable["L4"] == usable["A10"] == 22.0 and usable["T4"] == 14.7
    assert usable["V100"] == 15.8 and usable["V100 32GB"] == 31.7
    assert all(c.usable_gib < c.memory_gb for c in CARDS)  # the driver keeps some
    assert find_card("Tesla V100-SXM2-16GB").memory_gb == 16
