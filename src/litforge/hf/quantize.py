"""QLoRA: a Hugging Face model's base weights in 4 bits (bitsandbytes' NF4) under LoRA
adapters, `model.net.quantize=4bit`; CUDA only (the `qlora` extra installs bitsandbytes).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from litforge.errors import ConfigError

QUANTIZE = ("4bit",)
# NF4: 4 bits per weight, plus its blocks' scales, 0.127 bits per weight with double
# quantisation (Dettmers et al. 2023, "QLoRA", section 3).
NF4_BYTES_PER_WEIGHT = (4 + 0.127) / 8
PLANNED_BYTES = "litforge_bytes_per_element"  # on a parameter: what the budget counts


def check_quantize(quantize: str | None, lora: Any, planning: bool = False) -> None:
    """QLoRA: 4-bit base weights (bitsandbytes' NF4) under LoRA adapters, on CUDA only."""
    key = "model.net.quantize"
    if quantize is None:
        return
    if quantize not in QUANTIZE:
        raise ConfigError(f"{key}={quantize!r} is not one of: {', '.join(QUANTIZE)}, null")
    if not lora:
        raise ConfigError(
            f"{key}={quantize}: 4-bit weights do not train; QLoRA trains adapters over them: "
            "set model.net.lora too"
        )
    if planning:  # the budget and the plan: a meta model, its weights marked (plan_4bit)
        return
    if not torch.cuda.is_available():
        raise ConfigError(
            f"{key}={quantize} (QLoRA) needs a CUDA GPU: bitsandbytes' 4-bit layers run on "
            "CUDA and this machine has none; here, LoRA with precision=bf16-true keeps the "
            "base in 2 bytes per weight"
        )
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(
            f"{key}={quantize} needs bitsandbytes, which is not installed: "
            "pip install 'litforge[qlora]'"
        )


def quantized(quantize: str | None) -> dict[str, Any]:
    """from_pretrained's arguments for 4-bit NF4 weights computing in bfloat16, on the
    current CUDA device (QLoRA's recipe: Dettmers et al. 2023)."""
    if quantize is None:
        return {}
    from transformers import BitsAndBytesConfig

    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    return {"quantization_config": config, "device_map": {"": torch.cuda.current_device()}}


def plan_4bit(model: nn.Module) -> None:
    """Mark the weights bitsandbytes would quantize (every Linear but the output head, as
    transformers' loader skips it) with their NF4 size, for the memory budget to count."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for module in model.modules():
        if isinstance(module, nn.Linear) and module is not head:
            setattr(module.weight, PLANNED_BYTES, NF4_BYTES_PER_WEIGHT)
