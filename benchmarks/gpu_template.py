"""GPU benchmark, template against raw loop: what the template costs per step on the card.

The template (`litforge.training.train`) and the hand-written loop of `benchmarks.rawloop`
at the same settings, timed between two optimizer steps inside each run, interleaved.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

import lightning as L
import torch

if TYPE_CHECKING:
    from benchmarks.gpu import Shape

STAMPS: dict[int, float] = {}  # optimizer step -> perf_counter, written by StepStamp
WINDOW = (5, 35)  # steps between which template and raw loop are timed on the GPU


class StepStamp(L.Callback):
    """Records the time (device synchronised) after optimizer steps `first` and `last`."""

    def __init__(self, first: int = WINDOW[0], last: int = WINDOW[1]) -> None:
        self.steps = (first, last)

    def record(self, step: int) -> None:
        if step in self.steps:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            STAMPS[step] = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.record(trainer.global_step)


def template_vs_raw(
    shape: Shape, device: torch.device, repeats: int, window: tuple[int, int]
) -> dict[str, Any]:
    """Seconds per step of the template and of the raw loop, bf16-mixed, interleaved.

    The step time is measured inside each run between steps window[0] and window[1]
    (device synchronised at both), so start-up and the sanity validation drop out.
    """
    from benchmarks import rawloop
    from benchmarks.harness import scratch_dir
    from benchmarks.stats import interleaved, ratios
    from litforge import build as lf_build
    from litforge.cli import compose
    from litforge.training import train

    first, last = window
    overrides = [
        "experiment=gpt_char", "precision=bf16-mixed", "test=false",
        f"trainer.accelerator={'gpu' if device.type == 'cuda' else 'cpu'}", "trainer.devices=1",
        f"trainer.max_steps={last}", f"data.block_size={shape.block}",
        f"data.batch_size={shape.batch}", f"model.net.vocab_size={shape.vocab}",
        f"model.net.n_layer={shape.n_layer}", f"model.net.n_head={shape.n_head}",
        f"model.net.n_embd={shape.n_embd}", "model.net.dropout=0.0",
    ]  # fmt: skip
    stamp = [
        f"+callbacks.bench_stamp._target_={__name__}.StepStamp",
        f"+callbacks.bench_stamp.first={first}",
        f"+callbacks.bench_stamp.last={last}",
    ]

    def template() -> float:
        STAMPS.clear()
        train(compose([*overrides, *stamp], scratch_dir()))
        return (STAMPS[last] - STAMPS[first]) / (last - first)

    def raw() -> float:
        STAMPS.clear()
        run_dir = scratch_dir()
        cfg = compose(overrides, run_dir)
        datamodule = lf_build.build_datamodule(cfg)
        on_step = StepStamp(first, last).record
        rawloop.fit(cfg, datamodule, last, run_dir, str(device), torch.bfloat16, on_step=on_step)
        return (STAMPS[last] - STAMPS[first]) / (last - first)

    values = interleaved({"template": template, "raw": raw}, repeats)
    template_over_raw = ratios(values, "template", "raw")
    return {
        "ratio_median": statistics.median(template_over_raw),
        "ratio_min": min(template_over_raw),
        "ratio_max": max(template_over_raw),
        "template_s_per_step": statistics.median(values["template"]),
        "raw_s_per_step": statistics.median(values["raw"]),
    }
