"""GPU benchmarks (`benchmarks/gpu.sh`): throughput, MFU and memory of GPT-2-shaped models.

For a GPT-2-small-shaped model (124M parameters) and a ~350M one, sequence 1024:
  * tokens/s, TFLOP/s and MFU for 32-true (TF32 off, on), 16-mixed, bf16-mixed and
    bf16-mixed + torch.compile, measured on the plain net (`litforge_examples.nets.gpt.GPT`);
  * fp8 against bf16: tokens/s, MFU (model FLOPs over the bf16 dense peak, as torchtitan
    counts it) and peak memory in torchao float8 (tensorwise and rowwise, compiled, as
    torchao recommends), every Linear layer whose dimensions are multiples of 16 in float8,
    with `litforge plan`'s per-layer prediction beside the measured ratio; skipped with one
    line on a card without FP8 tensor cores (litforge.precision.fp8.cards);
  * peak memory with and without gradient checkpointing (bf16-mixed);
  * the template (`litforge.training.train`, default callbacks and logger) against the
    hand-written loop of `benchmarks.rawloop` (benchmarks/gpu_template.py) at the same settings (bf16-mixed, eager),
    time per step between two step counts inside each run, interleaved repeats.
FLOPs per step are counted with `FlopCounterMode` (attention included); MFU divides the
achieved rate by the datasheet dense peak of the GPU for that precision (litforge.planning.hardware).

`python -m benchmarks.gpu --smoke` runs every code path with tiny models on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.gpu_template import WINDOW, template_vs_raw
from litforge.planning.hardware import current_card, peak_dtype
from litforge_examples.nets.gpt import GPT, GPTConfig


@dataclass
class Shape:
    name: str
    n_layer: int
    n_head: int
    n_embd: int
    batch: int
    block: int = 1024
    vocab: int = 50304  # GPT-2's 50257 padded to a multiple of 64

    def net_config(self) -> GPTConfig:
        return GPTConfig(
            vocab_size=self.vocab, block_size=self.block, n_layer=self.n_layer,
            n_head=self.n_head, n_embd=self.n_embd, dropout=0.0, bias=False,
        )  # fmt: skip


SHAPES = [Shape("gpt-124M", 12, 12, 768, batch=16), Shape("gpt-350M", 24, 16, 1024, batch=16)]
SMOKE = [Shape("tiny-a", 2, 2, 64, batch=2, block=64, vocab=256)]

# (label, autocast dtype, TF32 matmuls, torch.compile, float8 recipe or None)
SETTINGS = [
    ("32-true", None, False, False, None),
    ("32-true +tf32", None, True, False, None),
    ("16-mixed", torch.float16, False, False, None),
    ("bf16-mixed", torch.bfloat16, False, False, None),
    ("bf16-mixed +compile", torch.bfloat16, False, True, None),
    ("fp8 +compile", torch.bfloat16, False, True, "tensorwise"),
    ("fp8-rowwise +compile", torch.bfloat16, False, True, "rowwise"),
]
# The smoke test's float8 path: eager, on the CPU (torch._scaled_mm runs there too).
FP8_EAGER = ("fp8", torch.bfloat16, False, False, "tensorwise")
FP8_MIN_DIM = 16  # every aligned Linear in float8: the question is what FP8 does to these GPTs


def peak_tflops(label: str, override: float | None) -> float | None:
    """The dense datasheet peak (litforge.planning.hardware) of this GPU for the setting `label`."""
    if override:
        return override
    card = current_card()
    if card is None:
        return None
    # "16-mixed" -> float16, "bf16-mixed" -> bfloat16, "32-true +tf32" -> tf32; fp8's MFU
    # is against the bf16 peak (the same model FLOPs; torchtitan counts it so)
    first = "bf16-mixed" if label.startswith("fp8") else label.split()[0]
    dtype = peak_dtype(first, tf32="tf32" in label)
    return card.peak_tflops.get(dtype) if dtype else None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def make_step(
    net: torch.nn.Module, shape: Shape, device: torch.device, dtype: torch.dtype | None
) -> Callable[[], torch.Tensor]:
    """One training step (forward, backward, AdamW) on random tokens; loss scaling for fp16."""
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=device.type == "cuda")
    scaler = torch.amp.GradScaler(device.type, enabled=dtype is torch.float16)
    gen = torch.Generator(device=device).manual_seed(0)
    tokens = torch.randint(
        shape.vocab, (shape.batch, shape.block + 1), device=device, generator=gen
    )
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step() -> torch.Tensor:
        ctx = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        with ctx:
            logits = net(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    return step


def build(
    shape: Shape, device: torch.device, checkpointing: bool = False, fp8: str | None = None
) -> GPT:
    torch.manual_seed(0)
    net = GPT(**dataclasses.asdict(shape.net_config())).to(device)
    net.gradient_checkpointing = checkpointing
    if fp8 is not None:  # as precision=fp8 converts at build: before compile
        from litforge.precision.fp8.training import convert

        convert(net, fp8, min_dim=FP8_MIN_DIM)
    return net.train()


def fp8_skip_reason(device: torch.device) -> str | None:
    """Why this device cannot time float8 (torchao missing, no FP8 tensor cores), or None."""
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        return "torchao is not installed (pip install 'litforge[fp8]')"
    if device.type != "cuda":
        return None
    from litforge.precision.fp8.cards import refusal

    return refusal(torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device))


def fp8_predicted(shape: Shape, flops: int) -> float:
    """`litforge plan`'s prediction of fp8 tokens/s over bf16's for this shape."""
    from litforge.planning.fp8_speed import linear_uses, step_factor
    from litforge.precision.fp8.layers import choose

    with torch.device("meta"):
        net = build(shape, torch.device("meta"))
    picked = {x.name for x in choose(net, FP8_MIN_DIM) if x.fp8}
    uses = linear_uses(net, torch.zeros(1, shape.block, dtype=torch.long), picked)
    return 1.0 / step_factor(uses, shape.batch, flops / shape.batch)


def flops_per_step(shape: Shape, device: torch.device) -> int:
    """Forward + backward FLOPs of one step, counted once on the eager float32 net."""
    net = build(shape, device)
    step = make_step(net, shape, device, None)
    with FlopCounterMode(display=False) as counter:
        step()
    del net, step
    return counter.get_total_flops()


def throughput(
    shape: Shape, device: torch.device, setting: tuple, steps: int, warmup: int
) -> dict[str, Any]:
    label, dtype, tf32, compiled, fp8 = setting
    set_tf32(tf32)
    net = build(shape, device, fp8=fp8)
    if compiled:
        net.compile()  # in place: parameter names stay those of the eager net
    step = make_step(net, shape, device, dtype)
    for _ in range(warmup):  # includes compilation
        step()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync(device)
    seconds = (time.perf_counter() - start) / steps
    set_tf32(False)
    if not torch.isfinite(loss):
        raise RuntimeError(f"{shape.name} {label}: loss is {loss.item()}")
    del net, step
    return {"s_per_step": seconds}


def peak_memory(
    shape: Shape, device: torch.device, checkpointing: bool, fp8: str | None = None
) -> float | None:
    """Peak allocated GiB over three bf16-mixed steps, float8 layers with `fp8` (None on
    the CPU)."""
    if device.type != "cuda":
        return None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    net = build(shape, device, checkpointing, fp8)
    step = make_step(net, shape, device, torch.bfloat16)
    for _ in range(3):
        step()
    sync(device)
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    del net, step
    return peak


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="GPU benchmarks (see benchmarks/gpu.sh)")
    parser.add_argument("--smoke", action="store_true", help="tiny models on the CPU")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per setting")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="template vs raw pairs")
    parser.add_argument("--peak-tflops", type=float, default=None, help="override the peak")
    parser.add_argument("--out", default="benchmarks/results/gpu.json")
    args = parser.parse_args(argv)

    if args.smoke:
        device, shapes, window = torch.device("cpu"), SMOKE, WINDOW
        settings = [s for s in SETTINGS if not s[3]] + [FP8_EAGER]  # no compiler on the CPU
    elif not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py: no CUDA device (torch.cuda.is_available() is False)")
    else:
        device, shapes, window, settings = torch.device("cuda"), SHAPES, WINDOW, SETTINGS
    from benchmarks.harness import setup

    setup()  # CI-style output, quiet Lightning; one CPU thread (the GPU does the work)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke test)"
    print(f"device: {name}, torch {torch.__version__}", flush=True)
    no_fp8 = fp8_skip_reason(device)
    if no_fp8 is not None:
        print(f"fp8 rows skipped: {no_fp8}", flush=True)
        settings = [s for s in settings if s[4] is None]
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for shape in shapes:
        params = sum(p.numel() for p in build(shape, torch.device("meta")).parameters())
        flops = flops_per_step(shape, device)
        tokens = shape.batch * shape.block
        for setting in settings:
            label = setting[0]
            result = throughput(shape, device, setting, args.steps, args.warmup)
            tflops = flops / result["s_per_step"] / 1e12
            peak = peak_tflops(label, args.peak_tflops)
            rows.append({
                "model": shape.name, "params_M": round(params / 1e6, 1), "setting": label,
                "tokens_per_s": round(tokens / result["s_per_step"]),
                "tflops": round(tflops, 1), "mfu": round(tflops / peak, 3) if peak else None,
            })  # fmt: skip
            print(f"  {shape.name} {label}: {rows[-1]}", flush=True)
        by = {r["setting"]: r for r in rows if r["model"] == shape.name}
        for fp8_label, bf16_label in (("fp8 +compile", "bf16-mixed +compile"),
                                      ("fp8-rowwise +compile", "bf16-mixed +compile"),
                                      ("fp8", "bf16-mixed")):  # fmt: skip
            if fp8_label in by and bf16_label in by:
                ratio = by[fp8_label]["tokens_per_s"] / by[bf16_label]["tokens_per_s"]
                rows.append({"model": shape.name, "setting": f"{fp8_label} / {bf16_label}",
                             "fp8_vs_bf16": round(ratio, 3),
                             "predicted": round(fp8_predicted(shape, flops), 3)})  # fmt: skip
                print(f"  {shape.name} {rows[-1]}", flush=True)
        for ckpt in (False, True):
            gib = peak_memory(shape, device, ckpt)
            rows.append({"model": shape.name, "setting": f"peak memory, ckpt={ckpt}", "GiB": gib})
            print(f"  {shape.name} peak memory ckpt={ckpt}: {gib}", flush=True)
        if no_fp8 is None and device.type == "cuda":
            gib = peak_memory(shape, device, False, "tensorwise")
            rows.append({"model": shape.name, "setting": "peak memory, fp8, ckpt=False",
                         "GiB": gib})  # fmt: skip
            print(f"  {shape.name} peak memory fp8: {gib}", flush=True)
        cmp = template_vs_raw(shape, device, args.repeats, window)
        rows.append({"model": shape.name, "setting": "template / raw (bf16-mixed)", **cmp})
        print(f"  {shape.name} template vs raw: {cmp}", flush=True)

    print(f"\nGPU benchmarks on {name} ({time.perf_counter() - t_start:.0f} s)\n")
    print("| model | setting | tokens/s | TFLOP/s | MFU | peak GiB | template/raw | fp8/bf16 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else ""
        gib = f"{r['GiB']:.1f}" if r.get("GiB") is not None else ""
        ratio = (
            f"{r['ratio_median']:.3f} ({r['ratio_min']:.3f}-{r['ratio_max']:.3f})"
            if "ratio_median" in r
            else ""
        )
        fp8 = (
            f"{r['fp8_vs_bf16']:.3f} (plan predicts {r['predicted']:.3f})"
            if "fp8_vs_bf16" in r
            else ""
        )
        print(
            f"| {r['model']} | {r['setting']} | {r.get('tokens_per_s', '')} "
            f"| {r.get('tflops', '')} | {mfu} | {gib} | {ratio} | {fp8} |"
        )
    with open(args.out, "w") as f:
        json.dump({"device": name, "rows": rows}, f, indent=2)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
