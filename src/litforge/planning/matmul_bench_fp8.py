"""`litforge matmul-bench --fp8 SHAPES`: a Linear layer's forward and backward in float8
(torchao's Float8Linear, tensorwise) against bf16, per (M, K, N) shape, on this device.

M is the rows the layer sees (micro-batch x tokens), K its inputs, N its outputs: the
shapes `litforge plan` predicts from torchao's published H100 figures
(litforge.planning.fp8_speed); each row gives the measured speedup beside that prediction.
`--fp8 auto` times the published shapes and a 7B-like transformer's; on a CPU, torch's
float8 runs through an emulated torch._scaled_mm, so the figures say nothing of a GPU.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from litforge.errors import ConfigError
from litforge.planning.fp8_speed import PUBLISHED, layer_speedup
from litforge.precision.fp8.training import convert

AUTO_GPU = (*((m, k, n) for m, k, n, _ in PUBLISHED), (8192, 4096, 4096), (8192, 4096, 14336),
            (8192, 14336, 4096), (2048, 768, 3072))  # fmt: skip
AUTO_CPU = ((64, 64, 256), (256, 256, 256))


def parse_shapes(text: str, device: torch.device) -> tuple[tuple[int, int, int], ...]:
    """ "auto" or "M,K,N;M,K,N": each a multiple of 16 (float8 matmuls need it)."""
    if text == "auto":
        return AUTO_GPU if device.type == "cuda" else AUTO_CPU
    try:
        shapes = tuple(tuple(int(x) for x in part.split(",")) for part in text.split(";"))
    except ValueError:
        shapes = ()
    if not shapes or any(len(s) != 3 or any(x < 16 or x % 16 for x in s) for s in shapes):
        raise ConfigError(
            f"--fp8={text!r} must be auto or shapes M,K,N separated by ';', each a multiple "
            "of 16, e.g. 4096,4096,4096;8192,4096,14336"
        )
    return shapes  # type: ignore[return-value]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_linear(layer: nn.Module, m: int, device: torch.device, seconds: float) -> float:
    """Best seconds of one forward and backward of `layer` on an (m, K) bf16 input under
    bf16 autocast, over three timed loops after a warm-up."""
    x = torch.randn(m, layer.in_features, device=device, dtype=torch.bfloat16, requires_grad=True)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            layer(x).sum().backward()

    step()  # kernel selection, allocations
    _sync(device)
    start = time.perf_counter()
    step()
    _sync(device)
    iters = max(1, min(1000, int(seconds / max(time.perf_counter() - start, 1e-9))))
    best = float("inf")
    for _ in range(3):
        _sync(device)
        start = time.perf_counter()
        for _ in range(iters):
            step()
        _sync(device)
        best = min(best, (time.perf_counter() - start) / iters)
    return best


def run_fp8(
    shapes: tuple[tuple[int, int, int], ...], device: torch.device, seconds: float
) -> list[dict[str, Any]]:
    """Per shape: bf16 and float8 milliseconds, the measured and the predicted speedup."""
    rows = []
    for m, k, n in shapes:
        torch.manual_seed(0)
        plain = nn.Linear(k, n, bias=False, device=device)
        float8 = nn.Sequential(nn.Linear(k, n, bias=False, device=device))
        convert(float8, "tensorwise", min_dim=16)
        bf16_s = time_linear(plain, m, device, seconds)
        fp8_s = time_linear(float8[0], m, device, seconds)
        rows.append({"m": m, "k": k, "n": n, "bf16_ms": bf16_s * 1e3, "fp8_ms": fp8_s * 1e3,
                     "speedup": bf16_s / fp8_s, "predicted": layer_speedup(m, k, n)})  # fmt: skip
    return rows


def fp8_table(rows: list[dict[str, Any]], device: str) -> str:
    lines = [f"float8 (torchao tensorwise) against bf16, one Linear forward + backward, on {device}",
             f"{'M':>6} {'K':>6} {'N':>6} {'bf16 ms':>9} {'fp8 ms':>9} {'speedup':>8} "
             f"{'predicted':>10}"]  # fmt: skip
    for r in rows:
        lines.append(f"{r['m']:>6} {r['k']:>6} {r['n']:>6} {r['bf16_ms']:>9.3g} "
                     f"{r['fp8_ms']:>9.3g} {r['speedup']:>8.2f} {r['predicted']:>10.2f}")  # fmt: skip
    lines.append("predicted: litforge plan's stand-in, fitted to torchao's published H100 figures")
    return "\n".join(lines)
