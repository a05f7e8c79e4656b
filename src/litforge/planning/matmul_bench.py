"""What this device's matrix units deliver: `python -m litforge.matmul_bench [--json]`.

Times square matrix products C = A @ B (2 n^3 FLOPs each) per dtype and size, after a
warm-up, with the device synchronized around each timed loop; reports the best TFLOP/s of
each dtype, its ratio to float32, and its ratio to the card's dense peak from
`litforge.planning.hardware`. On a GPU: float32 (TF32 off), TF32, float16 and bfloat16 at
n = 1024..8192. On a CPU: float32 and bfloat16 at n = 128..512 (a quick check, not a
benchmark of the CPU). Sizes whose three n x n matrices do not fit the memory available
are refused in one line before anything is allocated. `--fp8 auto` (or M,K,N;...) times
a Linear layer's forward and backward in float8 against bf16 per shape instead
(litforge.planning.matmul_bench_fp8).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from litforge.errors import ConfigError
from litforge.planning.bench_memory import check_fits
from litforge.planning.hardware import current_card

GPU_SIZES = (1024, 2048, 4096, 8192)
CPU_SIZES = (128, 256, 512)
GPU_DTYPES = ("float32", "tf32", "float16", "bfloat16")
CPU_DTYPES = ("float32", "bfloat16")
TORCH_DTYPES = {
    "float32": torch.float32,
    "tf32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


@contextmanager
def matmul_precision(dtype: str) -> Iterator[None]:
    """float32 products in TF32 for "tf32", in full float32 for everything else."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_matmul(n: int, dtype: str, device: torch.device, min_seconds: float) -> float:
    """Best achieved TFLOP/s of an n x n product over three timed loops of about
    `min_seconds` each, after a warm-up that also sizes the loops."""
    gen = torch.Generator(device=device).manual_seed(0)
    # Drawn in the dtype itself: a float32 draw cast down would hold a fourth matrix.
    a = torch.randn(n, n, device=device, generator=gen, dtype=TORCH_DTYPES[dtype])
    b = torch.randn(n, n, device=device, generator=gen, dtype=TORCH_DTYPES[dtype])
    out = torch.empty_like(a)
    with matmul_precision(dtype):
        torch.matmul(a, b, out=out)  # first call: kernel selection, allocations
        _sync(device)
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        _sync(device)
        iters = max(1, min(1000, int(min_seconds / max(time.perf_counter() - start, 1e-9))))
        best = 0.0
        for _ in range(3):
            _sync(device)
            start = time.perf_counter()
            for _ in range(iters):
                torch.matmul(a, b, out=out)
            _sync(device)
            best = max(best, 2 * n**3 * iters / (time.perf_counter() - start) / 1e12)
    return best


def run(
    sizes: tuple[int, ...], dtypes: tuple[str, ...], device: torch.device, min_seconds: float
) -> dict[str, Any]:
    """Every (dtype, size) timing, and per dtype the best with its ratios."""
    card = current_card() if device.type == "cuda" else None
    rows = [
        {"dtype": d, "size": n, "tflops": _timed(n, d, device, min_seconds)}
        for d in dtypes
        for n in sizes
    ]
    best = {d: max(r["tflops"] for r in rows if r["dtype"] == d) for d in dtypes}
    summary = []
    for d in dtypes:
        peak = card.peak_tflops.get(d) if card else None
        summary.append({
            "dtype": d,
            "tflops": best[d],
            "vs_float32": best[d] / best["float32"] if "float32" in best else None,
            "peak_tflops": peak,
            "vs_peak": best[d] / peak if peak else None,
        })  # fmt: skip
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {
        "device": name,
        "card": card.name if card else None,
        "torch": torch.__version__,
        "rows": rows,
        "summary": summary,
    }


def _timed(n: int, dtype: str, device: torch.device, min_seconds: float) -> float:
    """time_matmul, with an allocation that fails anyway (memory taken meanwhile, or
    fragmented) said in one line."""
    try:
        return time_matmul(n, dtype, device, min_seconds)
    except RuntimeError as err:  # torch.OutOfMemoryError (CUDA) is one; CPU's is plain
        if not isinstance(err, torch.OutOfMemoryError) and "allocate" not in str(err):
            raise
        if device.type == "cuda":
            torch.cuda.empty_cache()
        # CPU: "... you tried to allocate 3600000000 bytes"; CUDA: "Tried to allocate 3.35 GiB"
        amount = re.search(r"tried to allocate (\d[\d.]*\s?\w+)", str(err), re.IGNORECASE)
        detail = f"tried to allocate {amount[1]}" if amount else type(err).__name__
        raise ConfigError(
            f"--sizes={n}: out of {device.type} memory for the {dtype} matrices ({detail}); "
            "pick smaller sizes"
        ) from None


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or any(n < 1 or n > 65536 for n in sizes):
        raise ConfigError(
            f"--sizes={text!r} must be comma-separated matrix sizes from 1 to 65536, e.g. 1024,4096"
        )
    return sizes


def parse_dtypes(text: str, device: torch.device) -> tuple[str, ...]:
    valid = GPU_DTYPES if device.type == "cuda" else ("float32", "float16", "bfloat16")
    dtypes = tuple(d.strip() for d in text.split(","))
    bad = [d for d in dtypes if d not in valid]
    if bad or not dtypes:
        raise ConfigError(
            f"--dtypes={text!r}: {bad[0] if bad else text!r} is not one of: {', '.join(valid)} (on {device.type})"
        )
    return dtypes


def _table(result: dict[str, Any]) -> str:
    card = f" ({result['card']})" if result["card"] else ""
    lines = [f"matmul throughput on {result['device']}{card}, torch {result['torch']}"]
    lines.append(f"{'dtype':<9} {'n':>6} {'TFLOP/s':>9}")
    lines += [f"{r['dtype']:<9} {r['size']:>6} {r['tflops']:>9.3g}" for r in result["rows"]]
    lines.append(f"\n{'dtype':<9} {'best':>9} {'x float32':>10} {'peak':>8} {'of peak':>8}")
    for s in result["summary"]:
        ratio = f"{s['vs_float32']:.2f}" if s["vs_float32"] is not None else "-"
        peak = f"{s['peak_tflops']:g}" if s["peak_tflops"] else "-"
        share = f"{s['vs_peak']:.0%}" if s["vs_peak"] is not None else "-"
        lines.append(f"{s['dtype']:<9} {s['tflops']:>9.3g} {ratio:>10} {peak:>8} {share:>8}")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(message)  # one line, not argparse's usage block


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(
        prog="python -m litforge.matmul_bench", description=__doc__, allow_abbrev=False
    )
    parser.add_argument("--sizes", help="comma-separated n (default: 1024..8192 GPU, 128..512 CPU)")
    parser.add_argument("--dtypes", help=f"comma-separated, of {', '.join(GPU_DTYPES)}")
    parser.add_argument("--seconds", type=float, default=None, help="per timed loop")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument(
        "--fp8", help="auto or M,K,N;...: a Linear layer in float8 against bf16 per shape"
    )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = device.type == "cuda"
    try:
        args = parser.parse_args(argv)
        sizes = parse_sizes(args.sizes) if args.sizes else (GPU_SIZES if gpu else CPU_SIZES)
        dtypes = (
            parse_dtypes(args.dtypes, device)
            if args.dtypes
            else (GPU_DTYPES if gpu else CPU_DTYPES)
        )
        seconds = args.seconds if args.seconds is not None else (0.2 if gpu else 0.02)
        if not 0 < seconds <= 60:
            raise ConfigError(f"--seconds={seconds} must be in (0, 60]")
        if args.fp8:
            return _fp8(args.fp8, device, seconds, args.json)
        check_fits(max(sizes), {d: TORCH_DTYPES[d] for d in dtypes}, device)
        result = run(sizes, dtypes, device, seconds)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    print(json.dumps(result, indent=2) if args.json else _table(result))
    return 0


def _fp8(text: str, device: torch.device, seconds: float, as_json: bool) -> int:
    from litforge.planning.matmul_bench_fp8 import fp8_table, parse_shapes, run_fp8

    shapes = parse_shapes(text, device)
    check_fits(max(max(s) for s in shapes), {"float32": torch.float32}, device)
    rows = run_fp8(shapes, device, seconds)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(json.dumps({"device": name, "fp8": rows}, indent=2) if as_json else fp8_table(rows, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
