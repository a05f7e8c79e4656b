"""Attention counted as CUDA's fused kernels save it, whatever kernel this machine runs.

A CPU picks the math kernel for `F.scaled_dot_product_attention` with dropout, which saves
the (s x s) attention matrices for backward; CUDA's flash and memory-efficient kernels
save only the inputs, the output and a float32 log-sum-exp per query (and the RNG state
for dropout). Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models") count 34*s*b*h + 5*a*s^2*b bytes per layer in 16 bits; the fused
kernels keep the 34*s*b*h. Inside `FusedAttention()` every call to
`scaled_dot_product_attention` runs the same attention but saves what the fused kernels
save, so the memory budget measured on a laptop answers for a GPU.

Dropout is the other kernel that differs: a CPU's `F.dropout` keeps its mask in the
input's dtype (2 bytes per element in bfloat16), CUDA's fused `native_dropout` a bool mask
(1 byte), which is what Korthikanti et al. count; inside `FusedKernels()` dropout runs
`native_dropout` on every device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

SDPA = F.scaled_dot_product_attention


class _SavedLikeFused(torch.autograd.Function):
    """SDPA whose backward keeps q, k, v, an optional mask, the output (in the fused
    kernels' (B, T, heads, D) layout) and a float32 log-sum-exp; backward recomputes."""

    @staticmethod
    def forward(ctx: Any, q, k, v, mask, kwargs: dict[str, Any]) -> torch.Tensor:  # noqa: ANN001
        ctx.kwargs = kwargs
        ctx.rng = torch.get_rng_state(), _cuda_rng(q)
        out = SDPA(q, k, v, attn_mask=mask, **kwargs)
        # The fused kernels write (B, T, heads, D) and return it as a (B, heads, T, D) view,
        # so the usual `y.transpose(1, 2).contiguous()` that follows copies nothing.
        if out.dim() == 4:
            out = out.transpose(1, 2).contiguous().transpose(1, 2)
        lse = torch.empty(out.shape[:-1], dtype=torch.float32, device=out.device)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor):  # noqa: ANN205
        q, k, v, mask, _, _ = ctx.saved_tensors
        cpu_rng, cuda_rng = ctx.rng
        inputs = [t.detach().requires_grad_(t.requires_grad) for t in (q, k, v)]
        devices = [q.device] if cuda_rng is not None else []
        with torch.random.fork_rng(devices), torch.enable_grad():
            torch.set_rng_state(cpu_rng)  # the same dropout mask as the forward's
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, q.device)
            out = SDPA(*inputs, attn_mask=mask, **ctx.kwargs)
        wanted = [t for t in inputs if t.requires_grad]
        found = iter(torch.autograd.grad(out, wanted, grad_out)) if wanted else iter(())
        grads = [next(found) if t.requires_grad else None for t in inputs]
        return (*grads, None, None)


def _dropout(
    input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> torch.Tensor:
    if not training or p == 0 or inplace or not input.is_floating_point():
        return F.dropout(input, p, training, inplace)
    return torch.native_dropout(input, p, True)[0]


def _cuda_rng(t: torch.Tensor) -> torch.Tensor | None:
    return torch.cuda.get_rng_state(t.device) if t.device.type == "cuda" else None


class FusedKernels(TorchFunctionMode):
    """While active, `scaled_dot_product_attention` and `dropout` save for backward what
    CUDA's fused kernels save; `calls` counts the attention calls it changed (0: the model
    computes attention some other way, which is then counted as it runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = dict(kwargs or {})
        if func is F.dropout and torch.is_grad_enabled():
            return _dropout(*args, **kwargs)
        if func is not SDPA or not torch.is_grad_enabled():
            return func(*args, **kwargs)
        q, k, v, *rest = args
        mask = rest[0] if rest else kwargs.pop("attn_mask", None)
        if len(rest) > 1:  # dropout_p, is_causal, scale, enable_gqa given by position
            names = ("dropout_p", "is_causal", "scale", "enable_gqa")
            kwargs.update(zip(names, rest[1:], strict=False))
        self.calls += 1
        return _SavedLikeFused.apply(q, k, v, mask, kwargs)
