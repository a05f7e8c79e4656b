"""For one card and a number of them: the settings that fit, and the fastest of those.

A setting is a precision the card runs, gradient checkpointing off or on, and a micro-batch
x accumulation that keeps the configured effective batch over the GPUs, under DDP (every
GPU holds the whole model) or FSDP (weights, gradients and optimizer state sharded over
them). Memory per GPU comes from the memory budget (`litforge.planning.budget`), measured
here with attention counted as CUDA's fused kernels save it; step time is the step's
FLOPs over the GPUs' dense peak times an MFU (model FLOPs utilisation) assumption, and
times a scaling efficiency per doubling of GPUs for the communication it does not model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from litforge.planning.budget.depth import shard_unit_of
from litforge.planning.budget.measure import Subject
from litforge.planning.hardware import Card, peak_dtype
from litforge.planning.plan.fp8 import fp8_factor

COUNTS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Setting:
    """How the run is set on `count` cards, and what one card then holds."""

    sharded: bool  # FSDP (trainer=fsdp), else DDP
    precision: str
    checkpointing: bool | None
    micro_batch: int
    accumulate: int
    memory: int  # bytes per GPU
    step_s: float  # one optimizer step

    @property
    def strategy(self) -> str:
        return "fsdp" if self.sharded else "ddp"

    def brief(self, count: int) -> str:
        """ "bf16-mixed, 16x4, checkpointing, fsdp": the table's cell for `count` GPUs (one
        GPU runs no DDP: no strategy is named)."""
        parts = [self.precision, f"{self.micro_batch}x{self.accumulate}"]
        if self.checkpointing:
            parts.append("checkpointing")
        if count > 1 or self.sharded:
            parts.append(self.strategy)
        return ", ".join(parts)

    def overrides(self, count: int) -> str:
        parts = [f"trainer.devices={count}"]
        if count > 1 or self.sharded:
            parts.append(f"trainer={self.strategy}")
        parts += [f"precision={self.precision}", f"data.batch_size={self.micro_batch}",
                  f"trainer.accumulate_grad_batches={self.accumulate}"]  # fmt: skip
        if self.checkpointing is not None:
            parts.append(f"model.gradient_checkpointing={str(self.checkpointing).lower()}")
        return " ".join(parts)


@dataclass(frozen=True)
class Work:
    """What one optimizer step computes: the effective batch, and FLOPs per sample."""

    effective_batch: int
    model_flops: float  # per sample, forward and backward (PaLM's model FLOPs)
    hardware_flops: float  # per sample, with gradient checkpointing's recomputation


def precisions(card: Card) -> list[tuple[str, str]]:
    """(precision to train with, the one the budget measures it by) the card runs. fp8 is
    measured as bf16-mixed: the same float32 weights and optimizer state, and activations
    as bf16's (the plan's model is built in bf16; `litforge budget precision=fp8` measures
    the float8 layers' own, within a few percent of bf16's on the example GPT); its speed:
    plan.fp8."""
    if "float8" in card.peak_tflops:  # Ada, Hopper: FP8 tensor cores
        return [("bf16-mixed", "bf16-mixed"), ("fp8", "bf16-mixed"), ("bf16-true", "bf16-true"),
                ("32", "32")]  # fmt: skip
    if "bfloat16" in card.peak_tflops:
        return [("bf16-mixed", "bf16-mixed"), ("bf16-true", "bf16-true"), ("32", "32")]
    if "float16" in card.peak_tflops:  # V100, T4: float16 costs what bfloat16 does
        return [(p, measured_as(p)) for p in ("16-mixed", "16-true", "32")]
    return [("32", "32")]


def measured_as(precision: str) -> str:
    """The precision the budget measures `precision` by (float16 costs what bfloat16 does)."""
    return {"16-mixed": "bf16-mixed", "16-true": "bf16-true"}.get(precision, precision)


def settings(
    subject: Subject,
    work: Work,
    card: Card,
    count: int,
    mfu: float,
    scaling: float,
    measured_tflops: dict[str, float] | None = None,
) -> list[Setting]:
    """Every setting that fits one card of the `count`, fastest first; `measured_tflops`
    (dtype -> the card's measured matmul rate) replaces the datasheet's peaks."""
    if work.effective_batch % count:
        return []
    per_gpu = work.effective_batch // count
    micro = [m for m in range(per_gpu, 0, -1) if per_gpu % m == 0]
    switch = (None,) if subject.checkpointing is None else (False, True)
    shardings = [False] + ([True] if count > 1 and shard_unit_of(subject.module) else [])
    found = []
    for precision, measured in precisions(card):
        # fp8: bf16's rate for the whole step, then its float8 layers' predicted factor
        dtype = peak_dtype("bf16-mixed" if precision == "fp8" else precision, False) or "float32"
        rate = (measured_tflops or {}).get(dtype)
        peak = rate * 1e12 if rate else card.peak_flops(dtype) or 0.0
        states = subject.states(measured)
        for checkpointing in switch:
            flops = work.hardware_flops if checkpointing else work.model_flops
            efficiency = scaling ** math.log2(count)
            step_s = flops * work.effective_batch / (count * peak * mfu * efficiency)
            for sharded in shardings:
                shards = count if sharded else 1
                held = sum(-(-b // shards) for b in (states.weights, states.gradients,
                                                      states.optimizer))  # fmt: skip
                for m in micro:  # the largest micro-batch that fits
                    memory = held + subject.activations(measured, checkpointing, m)
                    if memory <= card.memory_bytes:
                        step = step_s
                        if precision == "fp8":  # bf16's time, its float8 layers predicted
                            step *= fp8_factor(subject, m, work.model_flops)
                        found.append(Setting(sharded, precision, checkpointing, m,
                                             per_gpu // m, memory, step))  # fmt: skip
                        break
                else:
                    continue
                break  # DDP fits: FSDP would only add communication
    rank = [p for p, _ in precisions(card)]  # mixed before true half at the same speed
    return sorted(found, key=lambda s: (s.step_s, rank.index(s.precision),
                                        s.checkpointing is True, -s.micro_batch))  # fmt: skip
