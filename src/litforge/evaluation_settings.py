"""sample.* and inference.*: eval.py's own keys (litforge.evaluation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litforge.precision import PRECISIONS
from litforge.settings import Settings, key
from litforge.settings.rules import Int, ListOf, Num, OneOf, Text


@dataclass(frozen=True)
class SampleSettings(Settings):
    """Language models only: continue `prompt` after evaluating."""

    GROUP = "sample"
    TITLE = "sample (eval.py)"
    GROUP_FILE = "litforge/eval_settings.yaml"

    prompt: str | None = key(None, Text(null=True), "the text to continue; null: no sample")
    max_new_tokens: int = key(300, Int(1), "tokens to generate")
    temperature: float = key(0.8, Num(0.0, open_lo=True), "softmax temperature of the sampling")
    top_k: int | None = key(
        20, Int(1, null=True), "sample among the k likeliest tokens (null: all)"
    )


@dataclass(frozen=True)
class InferenceSettings(Settings):
    """Is reduced precision safe for inference? Test the checkpoint in each precision."""

    GROUP = "inference"
    TITLE = "inference (eval.py)"
    GROUP_FILE = "litforge/eval_settings.yaml"

    precisions: list[Any] | None = key(
        None,
        ListOf(OneOf((*PRECISIONS, 32, "int8-dynamic")), null=True),
        "e.g. [32,bf16-true,16-true,int8-dynamic]; writes inference_precision.md/json/png",
    )
    threshold: float = key(
        0.01,
        Num(0.0, 1.0, open_lo=True, open_hi=True),
        "a metric more than this share away from float32's: not safe",
    )
