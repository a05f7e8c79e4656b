"""litforge's default optimizer and LR schedule, as `_target_` + `_partial_` factories.

conf/model/*.yaml name them like any torch.optim class:

    optimizer: {_target_: litforge.optim.adamw, _partial_: true, lr: 3.0e-3}
    scheduler: {_target_: litforge.optim.warmup_cosine, _partial_: true, warmup_steps: 20}

so `torch.optim.SGD` or `torch.optim.lr_scheduler.StepLR` drop in the same way.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

TotalSteps = int | Callable[[], int]


def adamw(
    params: Iterable[torch.nn.Parameter],
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
) -> torch.optim.AdamW:
    """AdamW that decays matrices only; biases, norms and gains stay undecayed (GPT-2
    practice). `params`: parameters, as every torch.optim optimizer takes them."""
    for name, value, positive in (
        ("lr", lr, True),
        ("eps", eps, True),
        ("weight_decay", weight_decay, False),
    ):
        if not (value > 0 if positive else value >= 0):
            raise ValueError(f"{name}={value} must be {'>' if positive else '>='} 0")
    trainable = [p for p in params if p.requires_grad]
    groups = [
        {"params": [p for p in trainable if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in trainable if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=betas, eps=eps)


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int = 0,
    min_lr_ratio: float = 0.1,
    total_steps: TotalSteps | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over `warmup_steps`, then cosine decay to `min_lr_ratio * lr` at
    `total_steps` (steps once per optimizer step).

    total_steps: an int, or a function asked the first time it is needed (after warmup).
    litforge's modules pass `trainer.estimated_stepping_batches` that way: asking for it
    inside `configure_optimizers` builds the train iterator before a resumed run's loop
    state is restored, and the resumed epoch would replay epoch 0's order.
    """
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps={warmup_steps} must be >= 0")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio={min_lr_ratio} must be from 0 to 1")
    known: list[int] = []

    def total() -> int:
        if not known:
            if total_steps is None:
                raise ValueError("warmup_cosine needs total_steps once warmup is over")
            value = total_steps() if callable(total_steps) else total_steps
            known.append(max(1, int(value)))
        return known[0]

    def factor(step: int) -> float:
        if step <= warmup_steps:
            return min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total() - warmup_steps))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def accepts(factory: Callable[..., Any], name: str) -> bool:
    """Whether calling `factory` (a partial) may pass `name`: the target takes it and the
    config has not bound it already."""
    bound = getattr(factory, "keywords", {}) or {}
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return name in params and name not in bound
