"""Figures 2 and 3 on the template's GPT: gradient checkpointing and bf16-mixed precision.

The subject is `model=gpt data=text` at the model group's default shape (4 layers, 128
wide, 128 characters of context, batch 32) with dropout off. Not experiment=gpt_char: that
is sized down (2 x 64) to learn most in a minute of CPU, and at width 64 the float32
logits kept for the loss (128 per token, twice the residual width) weigh more than in any
realistic GPT; its ratios are kept in `extra`. Dropout off because CPU attention has no
fused kernel with dropout: its math path keeps the (B, heads, T, T) probabilities in
float32 under bf16 autocast, a CPU artifact (CUDA's flash kernel takes dropout); the
ratio with dropout is kept in `extra` too.

Deterministic counts need no repeats:
  saved bytes  bytes of the distinct tensors autograd keeps for backward after one
               training forward + loss (parameters excluded: they exist anyway), counted
               by `litforge.planning.budget.estimate.saved_bytes`, the activation figure of
               `python -m litforge.budget`
  FLOPs        `torch.utils.flop_counter.FlopCounterMode` over forward + backward
Step time is CPU time per training step (forward, backward, AdamW), the paired slope of
two step counts, with the two sides interleaved.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import rawloop
from benchmarks.harness import scratch_dir
from benchmarks.stats import MIN_REPEATS, Figure, interleaved, per_step, ratios
from litforge import build
from litforge.cli import compose
from litforge.planning.budget.estimate import saved_bytes as count_saved_bytes
from litforge.planning.budget.measure import precision_plugin

STEPS = (2, 6)  # short and long run for the step-time slope


SUBJECT = ["model=gpt", "data=text", "model.net.dropout=0.0"]


def _setup(
    checkpointing: bool, *overrides: str
) -> tuple[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """The GPT (training mode) and one training batch; overrides apply after SUBJECT."""
    run_dir = scratch_dir()  # cfg needs one; no Trainer, logger or checkpoint writes there
    cfg = compose([*SUBJECT, f"model.gradient_checkpointing={checkpointing}", *overrides], run_dir)
    torch.manual_seed(cfg.seed)
    net = rawloop.build_net(cfg).train()
    datamodule = build.build_datamodule(cfg)
    datamodule.setup("fit")
    pairs = [datamodule.train_set[i] for i in range(cfg.data.batch_size)]
    shutil.rmtree(run_dir, ignore_errors=True)
    return net, (torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs]))


def _autocast(bf16: bool) -> contextlib.AbstractContextManager[Any]:
    # Lightning's own bf16-mixed plugin on CPU (autocast without the weight-cast cache), as
    # `python -m litforge.budget` measures it.
    return precision_plugin("bf16-mixed" if bf16 else "32", torch.device("cpu")).forward_context()


def saved_bytes(net: torch.nn.Module, batch: Any, bf16: bool = False) -> int:
    """Bytes autograd saves for backward in one forward + loss, each storage counted once,
    by the memory budget's own counter (`litforge.planning.budget.estimate.saved_bytes`)."""
    with _autocast(bf16):
        return count_saved_bytes(
            lambda: rawloop.loss_and_correct(net, batch)[0], [*net.parameters(), *net.buffers()]
        )


def flops(net: torch.nn.Module, batch: Any) -> int:
    """FLOPs of one forward + backward (recomputation included when checkpointing)."""
    with FlopCounterMode(display=False) as counter:
        loss, _ = rawloop.loss_and_correct(net, batch)
        loss.backward()
    net.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def _step_runner(net: torch.nn.Module, batch: Any, bf16: bool) -> Callable[[int], None]:
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)

    def run(steps: int) -> None:
        for _ in range(steps):
            with _autocast(bf16):
                loss, _ = rawloop.loss_and_correct(net, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return run


def _timed_pair(
    a: Callable[[int], None], b: Callable[[int], None], repeats: int
) -> dict[str, list[float]]:
    a(1), b(1)  # warm-up
    sides = {"a": lambda: per_step(a, *STEPS), "b": lambda: per_step(b, *STEPS)}
    return interleaved(sides, repeats)


def _plain_and_checkpointed(
    *overrides: str,
) -> tuple[torch.nn.Module, torch.nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """The same weights without and with gradient checkpointing, and one batch."""
    plain, batch = _setup(False, *overrides)
    ckpt, _ = _setup(True, *overrides)
    ckpt.load_state_dict(plain.state_dict())
    return plain, ckpt, batch


def _bf16_bytes_ratio(net: torch.nn.Module, batch: Any) -> float:
    return saved_bytes(net, batch, bf16=True) / saved_bytes(net, batch)


def measure_checkpointing(repeats: int = MIN_REPEATS) -> dict[str, Figure]:
    plain, ckpt, batch = _plain_and_checkpointed()
    b_plain, b_ckpt = saved_bytes(plain, batch), saved_bytes(ckpt, batch)
    f_plain, f_ckpt = flops(plain, batch), flops(ckpt, batch)
    small, small_ckpt, small_batch = _plain_and_checkpointed("experiment=gpt_char")
    small_ratio = saved_bytes(small_ckpt, small_batch) / saved_bytes(small, small_batch)
    times = _timed_pair(
        _step_runner(ckpt, batch, False), _step_runner(plain, batch, False), repeats
    )
    return {
        "ckpt_saved_bytes": Figure.of(
            [b_ckpt / b_plain], "x", "<= 0.2",
            note="gradient checkpointing / plain: bytes saved for backward",
            extra={
                "bytes_plain": b_plain,
                "bytes_checkpointed": b_ckpt,
                "ratio_gpt_char": round(small_ratio, 4),
            },
        ),
        "ckpt_flops": Figure.of(
            [f_ckpt / f_plain], "x", "<= 1.35",
            note="gradient checkpointing / plain: FLOPs of forward + backward",
            extra={"flops_plain": f_plain, "flops_checkpointed": f_ckpt},
        ),
        "ckpt_step_time": Figure.of(
            ratios(times, "a", "b"), "x",
            note="gradient checkpointing / plain: CPU time per training step",
        ),
    }  # fmt: skip


def measure_precision(repeats: int = MIN_REPEATS) -> dict[str, Figure]:
    net, batch = _setup(checkpointing=False)
    b32, b16 = saved_bytes(net, batch), saved_bytes(net, batch, bf16=True)
    dropout_ratio = _bf16_bytes_ratio(_setup(False, "model.net.dropout=0.1")[0], batch)
    small_ratio = _bf16_bytes_ratio(*_setup(False, "experiment=gpt_char"))
    times = _timed_pair(_step_runner(net, batch, True), _step_runner(net, batch, False), repeats)
    return {
        "bf16_saved_bytes": Figure.of(
            [b16 / b32], "x", "<= 0.6",
            note="bf16-mixed / 32: bytes saved for backward",
            extra={
                "bytes_32": b32,
                "bytes_bf16_mixed": b16,
                "ratio_with_dropout_0.1": round(dropout_ratio, 4),
                "ratio_gpt_char": round(small_ratio, 4),
            },
        ),
        "bf16_step_time": Figure.of(
            ratios(times, "a", "b"), "x",
            note="bf16-mixed / 32: CPU time per training step (CPU bf16 kernels; GPU differs)",
        ),
    }  # fmt: skip
