"""How much faster a model trains in precision=fp8 than in bf16-mixed: a prediction per
Linear layer, by its matrix shape, for `litforge plan` before renting.

A Float8Linear runs its three matmuls (forward, input gradient, weight gradient) in float8
and pays for casting its input, weight and output gradient first. Per layer, with M rows
(tokens in the micro-batch), K inputs and N outputs, its time over the bf16 layer's is

    A + B * (M*K + K*N + M*N) / (M*K*N)

A: a float8 matmul's time over a bf16 one's; B: the casts' memory traffic against the
matmul's FLOPs. Both are fitted to the two per-shape figures torchao publishes for its
tensorwise recipe on an H100 with torch.compile (the float8 README, "Performance"):
M, K, N = 1024, 2048, 1024 runs at 0.80x and 4096, 8192, 16384 at 1.39x. That gives
A = 0.607 (float8 matmuls 1.65x bf16's) and B = 263 (about 6.6 bytes moved per cast
element at the H100's 3.35 TB/s, against ~800 TFLOP/s achieved in bf16). STAND-IN: these
are published H100 figures, used for every FP8 card (L4, L40S, RTX 4090 have another ratio
of bandwidth to FLOPs); `litforge matmul-bench --fp8` measures the card's own per shape.

End to end the published gains are smaller than per layer: +25% on Llama3-8B over 8xH100
(tensorwise, FSDP2, compile), +10% rowwise; 1.34-1.43x rowwise at 2K H200s (PyTorch blog,
"Accelerating Large Scale Training and Convergence with PyTorch Float8 Rowwise on Crusoe
2K H200s"); 0.96x with tensor parallelism on 4xH100 (torchtitan#1207). The rest of the
step (attention, norms, the optimizer, communication) does not speed up, which this
prediction counts: only the Linear layers' share of the FLOPs changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

# Fitted to torchao's two published H100 points (tensorwise, torch.compile): see above.
A = 0.607
B = 263.0
PUBLISHED = (  # (M, K, N, speedup of Float8Linear over bf16 Linear, forward + backward)
    (1024, 2048, 1024, 0.80),
    (4096, 8192, 16384, 1.39),
)
SOURCE = "torchao float8 README, H100, tensorwise, torch.compile (a stand-in, not this card)"


def layer_speedup(m: int, k: int, n: int) -> float:
    """Predicted bf16 time over float8 time of one Linear layer, forward and backward."""
    return 1.0 / (A + B * (m * k + k * n + m * n) / (m * k * n))


@dataclass(frozen=True)
class LinearUse:
    """One Linear layer as a training step uses it: rows per sample, K, N, in FP8 or not."""

    name: str
    rows_per_sample: int  # M for one sample: its tokens (1 for a vector per sample)
    in_features: int
    out_features: int
    fp8: bool

    def flops_per_sample(self) -> float:
        return 6.0 * self.rows_per_sample * self.in_features * self.out_features  # fwd + bwd


def linear_uses(module: nn.Module, sample: torch.Tensor, fp8: set[str]) -> list[LinearUse]:
    """Each Linear layer's rows per sample, read off one forward on meta tensors of a copy
    of `module` (`sample`: one sample's first tensor, batched as 1); `fp8`: the names the
    layer filter sends to float8."""
    rows: dict[str, int] = {}
    handles = []
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Linear):

            def hook(mod: nn.Module, args: tuple, name: str = name) -> None:
                rows.setdefault(name, args[0].numel() // mod.in_features)

            handles.append(sub.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            module(sample.to("meta"))
    finally:
        for handle in handles:
            handle.remove()
    linears = dict(module.named_modules())
    return [LinearUse(name, count, linears[name].in_features, linears[name].out_features,
                      name in fp8) for name, count in rows.items()]  # fmt: skip


def step_factor(uses: Sequence[LinearUse], micro_batch: int, model_flops: float) -> float:
    """fp8 step time over bf16's: the float8 layers' FLOP shares at their predicted speed,
    the rest unchanged. `model_flops`: one sample's forward and backward FLOPs."""
    if model_flops <= 0:
        return 1.0
    factor = 1.0
    for use in uses:
        if use.fp8:
            share = use.flops_per_sample() / model_flops
            m = micro_batch * use.rows_per_sample
            factor += share * (1.0 / layer_speedup(m, use.in_features, use.out_features) - 1.0)
    return factor
