"""What a card offers: memory and dense peak TFLOP/s by dtype, and memory-size parsing.

Used by the memory budget (`--device-memory H100`), the throughput/MFU callback and
`python -m litforge.matmul_bench`. Our own table because Lightning's peak-FLOPs table
(lightning.fabric.utilities.throughput._CUDA_FLOPS) is wrong for H200 and H100 NVL
(pytorch-lightning #21677) and knows no memory sizes.

Peaks are dense (no 2:4 sparsity), tensor-core figures for tf32/bf16/fp16 and the plain
FP32 figure for float32, in TFLOP/s, from each vendor datasheet named in the comment.
Memory is the datasheet's figure in GiB; the CUDA driver keeps a few hundred MiB of it.
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
    memory_gib: float
    # dtype name (DTYPES) -> dense peak TFLOP/s; a dtype the card lacks is absent
    peak_tflops: dict[str, float] = field(default_factory=dict)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)


def _card(name: str, gib: float, fp32: float, tf32: float | None, half: float | None,
          bf16: bool = True) -> Card:  # fmt: skip
    peaks = {"float32": fp32}
    if tf32 is not None:
        peaks["tf32"] = tf32
    if half is not None:
        peaks["float16"] = half
        if bf16:
            peaks["bfloat16"] = half
    return Card(name, gib, peaks)


# Most specific names first: a device name is matched against these in order.
CARDS: tuple[Card, ...] = (
    # NVIDIA H200 datasheet (SXM / NVL columns), nvidia.com/en-us/data-center/h200
    _card("H200 NVL", 141, 60.0, 417.5, 835.5),
    _card("H200", 141, 67.0, 494.7, 989.4),
    # NVIDIA H100 datasheet (SXM / PCIe / NVL columns), nvidia.com/en-us/data-center/h100
    _card("H100 NVL", 94, 60.0, 417.5, 835.5),
    _card("H100 PCIe", 80, 51.0, 378.0, 756.0),
    _card("H100", 80, 67.0, 494.7, 989.4),  # SXM
    # NVIDIA A100 datasheet (80 GB SXM; the 40 GB card has the same peaks)
    _card("A100", 80, 19.5, 156.0, 312.0),
    # NVIDIA L40S datasheet
    _card("L40S", 48, 91.6, 183.0, 362.05),
    # NVIDIA L4 datasheet
    _card("L4", 24, 30.3, 60.0, 121.0),
    # NVIDIA A10 datasheet
    _card("A10", 24, 31.2, 62.5, 125.0),
    # NVIDIA Ada Lovelace architecture whitepaper, RTX 4090 (FP16/BF16 tensor, FP32 accumulate)
    _card("RTX 4090", 24, 82.6, 82.6, 165.2),
    # NVIDIA V100 datasheet (SXM2): no TF32, no bfloat16
    _card("V100", 32, 15.7, None, 125.0, bf16=False),
    # NVIDIA T4 datasheet: no TF32, no bfloat16
    _card("T4", 16, 8.1, None, 65.0, bf16=False),
)

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


def find_card(name: str) -> Card | None:
    """The card whose name appears in `name` (a CUDA device name or a user's "h100 pcie")."""
    wanted = " ".join(name.lower().replace("-", " ").split())
    for card in CARDS:  # whole words: "L4" is not "L40S", "A10" is not "A100"
        if re.search(rf"\b{re.escape(card.name.lower())}\b", wanted):
            return card
    return None


def current_card() -> Card | None:
    """The table's entry for CUDA device 0, or None (CPU, or a card not in the table)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return find_card(torch.cuda.get_device_name(0))


def parse_memory(text: str, key: str = "--device-memory") -> int:
    """Bytes from "80GiB", "24 GB", "1.5TiB", a bare number of bytes, or a card name."""
    match = _SIZE.fullmatch(str(text))
    if match:
        return int(float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()])
    card = find_card(str(text))
    if card is not None:
        return card.memory_bytes
    names = ", ".join(c.name for c in CARDS)
    raise ConfigError(
        f"{key}={text!r} is neither a size (like 80GiB, 24GB, 16000MiB) nor a card name "
        f"(one of: {names})"
    )
