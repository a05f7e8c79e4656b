"""QLoRA: a Hugging Face model's base weights in 4 bits (bitsandbytes' NF4) under LoRA
adapters, `model.net.quantize=4bit`; CUDA only (the `qlora` extra installs bitsandbytes).
"""

from __future__ import annotations

from typing import Any

import torch

from litforge.errors import ConfigError

QUANTIZE = ("4bit",)


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
    if planning:  # the budget and the plan count the base weights unquantized (an upper bound)
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
