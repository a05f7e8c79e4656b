"""What a card offers: memory and dense peak TFLOP/s by dtype, and memory-size parsing.

Used by the memory budget (`--device-memory H100`), the throughput/MFU callback and
`python -m litforge.matmul_bench`. Our own table because Lightning's peak-FLOPs table
(lightning.fabric.utilities.throughput._CUDA_FLOPS) is wrong for H200 and H100 NVL
(pytorch-lightning #21677) and knows no memory sizes.

Peaks are dense (no 2:4 sparsity), tensor-core figures for tf32/bf16/fp16 and the plain
FP32 figure for float32, in TFLOP/s, from each vendor datasheet named in the comment
(datasheets headline the sparse figure, twice the dense one, marked with an asterisk).

Memory comes twice: `memory_gb`, the datasheet's size, and `usable_gib`, what CUDA gives
a process (`torch.cuda.get_device_properties().total_memory`, the "total capacity" of
PyTorch's out-of-memory message), which is what "fits" is held against. The usable
figures are typical reports on each card (a driver or ECC setting moves them by a few
hundred MiB); the CUDA context (about 0.5 GiB) comes out of them too, and is not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from litforge.errors import ConfigError

GIB = 1024**3
DTYPES = ("float32", "tf32", "bfloat16", "float16")


@dataclass(frozen=True)
class Card:
    name: str
    memory_gb: float  # the datasheet's memory size
    usable_gib: float  # what CUDA reports as the device's total memory
    # dtype name (DTYPES) -> dense peak TFLOP/s; a dtype the card lacks is absent
    peak_tflops: dict[str, float] = field(default_factory=dict)
    # other names the same card reports itself by
    aliases: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> int:
        """The usable memory, in bytes."""
        return int(self.usable_gib * GIB)

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for `dtype` (a DTYPES name); None if the card lacks it."""
        tflops = self.peak_tflops.get(dtype)
        return None if tflops is None else tflops * 1e12


def _card(name: str, gb: float, usable: float, fp32: float, tf32: float | None,
          half: float | None, bf16: bool = True, aliases: tuple[str, ...] = (),
          fp8: float | None = None) -> Card:  # fmt: skip
    peaks = {"float32": fp32}
    if fp8 is not None:  # FP8 tensor cores: compute capability 8.9+ (Ada, Hopper)
        peaks["float8"] = fp8
    if tf32 is not None:
        peaks["tf32"] = tf32
    if half is not None:
        peaks["float16"] = half
        if bf16:
            peaks["bfloat16"] = half
    return Card(name, gb, usable, peaks, aliases)


# Most specific names first: a device name is matched against these in order. CUDA names
# them "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200",
# "NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 4090", "Tesla V100-PCIE-16GB", ...
CARDS: tuple[Card, ...] = (
    # NVIDIA H200 datasheet, nvidia.com/en-us/data-center/h200: 141 GB; SXM FP32 67, TF32
    # 989*, BF16/FP16 1,979*, FP8 3,958*; NVL FP32 60, TF32 835*, BF16/FP16 1,671*, FP8
    # 3,341*. Usable: 139.8 GiB
    _card("H200 NVL", 141, 139.8, 60.0, 417.5, 835.5, fp8=1670.5),
    _card("H200", 141, 139.8, 67.0, 494.7, 989.4, fp8=1978.9),
    # NVIDIA H100 datasheet, nvidia.com/en-us/data-center/h100 (NVL 94 GB: FP32 60, TF32
    # 835*, BF16/FP16 1,671*, FP8 3,341*; PCIe 80 GB: FP32 51, TF32 756*, BF16/FP16 1,513*,
    # FP8 3,026*) and the Hopper whitepaper's dense SXM5 figures (FP32 66.9, TF32 494.7,
    # BF16/FP16 989.4, FP8 1,978.9). Usable: 79.1 GiB (80 GB cards' typical "total
    # capacity"), 93.1 GiB for the NVL
    _card("H100 NVL", 94, 93.1, 60.0, 417.5, 835.5, fp8=1670.5),
    _card("H100 PCIe", 80, 79.1, 51.0, 378.0, 756.0, aliases=("H100 HBM2e",), fp8=1513.0),
    _card("H100", 80, 79.1, 67.0, 494.7, 989.4, fp8=1978.9),  # SXM5 ("NVIDIA H100 80GB HBM3")
    # NVIDIA A100 datasheet: FP32 19.5, TF32 156, BF16/FP16 312 (dense), SXM and PCIe
    # alike; usable 39.4 / 79.1 GiB
    _card("A100 40GB", 40, 39.4, 19.5, 156.0, 312.0),
    _card("A100", 80, 79.1, 19.5, 156.0, 312.0),
    # NVIDIA L40S datasheet: 48 GB; FP32 91.6, TF32 183 (366*), BF16/FP16 362.05 (733*), FP8
    # 733 (1,466*); usable 44.4 GiB
    _card("L40S", 48, 44.4, 91.6, 183.0, 362.05, fp8=733.0),
    # NVIDIA L4 datasheet: 24 GB; FP32 30.3, TF32 120*, BF16/FP16 242*, FP8 485*; usable 22.0
    _card("L4", 24, 22.0, 30.3, 60.0, 121.0, fp8=242.5),
    # NVIDIA A10 datasheet: 24 GB; FP32 31.2, TF32 62.5, BF16/FP16 125 (dense); usable 22.0
    _card("A10", 24, 22.0, 31.2, 62.5, 125.0),
    # NVIDIA Ada Lovelace architecture whitepaper, RTX 4090: 24 GB; FP16/BF16 tensor with
    # FP32 accumulate 165.2, FP8 with FP32 accumulate 330.3, FP32 82.6; usable 23.6 GiB
    _card("RTX 4090", 24, 23.6, 82.6, 82.6, 165.2, fp8=330.3),
    # NVIDIA V100 datasheet: SXM2 FP32 15.7, FP16 tensor 125; PCIe FP32 14, FP16 112;
    # V100S datasheet: PCIe FP32 16.4, FP16 130. No TF32, no bfloat16. 16 or 32 GB:
    # usable 15.8 / 31.7 GiB
    _card("V100S PCIe", 32, 31.7, 16.4, None, 130.0, bf16=False),
    _card("V100 PCIe 32GB", 32, 31.7, 14.0, None, 112.0, bf16=False),
    _card("V100 PCIe", 16, 15.8, 14.0, None, 112.0, bf16=False),
    _card("V100 32GB", 32, 31.7, 15.7, None, 125.0, bf16=False),  # SXM2 32 GB
    _card("V100", 16, 15.8, 15.7, None, 125.0, bf16=False),  # SXM2 16 GB
    # NVIDIA T4 datasheet: 16 GB; FP32 8.1, FP16 tensor 65. No TF32, no bfloat16; usable
    # 14.7 GiB
    _card("T4", 16, 14.7, 8.1, None, 65.0, bf16=False),
)

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


def _words(text: str) -> list[str]:
    return text.lower().replace("-", " ").replace("_", " ").split()


def find_card(name: str) -> Card | None:
    """The first card all of whose name's words are words of `name` (a CUDA device name or
    a user's "h100 pcie"): "A100 40GB" is "NVIDIA A100-SXM4-40GB", "L4" is not "L40S"."""
    wanted = set(_words(name))
    for card in CARDS:
        if any(set(_words(n)) <= wanted for n in (card.name, *card.aliases)):
            return card
    return None


def current_card() -> Card | None:
    """The table's entry for CUDA device 0, or None (CPU, or a card not in the table)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return find_card(torch.cuda.get_device_name(0))


def peak_dtype(precision: str, tf32: bool) -> str | None:
    """The DTYPES entry whose peak bounds a run at Lightning precision `precision`
    ("32-true", "bf16-mixed", "16-true", ...); `tf32`: float32 matmuls may use TF32 (CUDA
    with torch.get_float32_matmul_precision() != "highest"). None for float64 and others."""
    name = str(precision)
    if name.startswith("bf16"):
        return "bfloat16"
    if name.startswith("16"):
        return "float16"
    if name in ("32", "32-true"):
        return "tf32" if tf32 else "float32"
    return None


def parse_memory(text: str, key: str = "--device-memory") -> int:
    """Bytes from "80GiB", "24 GB", "1.5TiB", a bare number of bytes, or a card name."""
    match = _SIZE.fullmatch(str(text))
    if match:
        size = int(float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()])
        if size <= 0:
            raise ConfigError(f"{key}={text!r} is no memory to fit in; give a size above 0")
        return size
    card = find_card(str(text))
    if card is not None:
        return card.memory_bytes
    names = ", ".join(c.name for c in CARDS)
    raise ConfigError(
        f"{key}={text!r} is neither a size (like 80GiB, 24GB, 16000MiB) nor a card name "
        f"(one of: {names})"
    )


def available_ram() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), in bytes; None elsewhere."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
