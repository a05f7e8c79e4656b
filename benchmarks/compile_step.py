"""Figure `compile_gpt_step`: a gpt_char training step (forward, backward, AdamW) with the
GPT's blocks compiled in place (`compile.enabled=true`, inductor) over the same eager.

Opt-in (`python -m benchmarks.run --only compile`): inductor generates and builds C++ for
the CPU, about a minute before the first compiled step. Both sides are one module each,
built from the experiment's config, warmed up (the compiled one past its compilation),
then timed in interleaved blocks of steps on the same batches: CPU time per step.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch

from benchmarks.harness import scratch_dir
from benchmarks.stats import Figure, interleaved, ratios
from litforge import build, compiling
from litforge.cli import compose

OVERRIDES = ["experiment=gpt_char", "trainer.accelerator=cpu", "compile.enabled=true"]
STEPS = 5  # per timed block


def _stepper(module: torch.nn.Module, batches: list[Any]) -> Any:
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)

    def steps(count: int) -> float:
        start = time.process_time()
        for i in range(count):
            x, y = batches[i % len(batches)]
            loss = torch.nn.functional.cross_entropy(module(x).flatten(0, 1), y.flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return (time.process_time() - start) / count

    return steps


def measure(repeats: int = 5) -> dict[str, Figure]:
    cfg = compose(OVERRIDES, scratch_dir())
    settings = compiling.options(cfg)
    assert settings is not None
    datamodule = build.build_datamodule(cfg)
    datamodule.setup("fit")
    loader = iter(torch.utils.data.DataLoader(datamodule.train_set, batch_size=cfg.data.batch_size))
    batches = [next(loader) for _ in range(4)]
    eager = build.build_module(cfg)
    compiled = copy.deepcopy(eager)
    compiling.compile_in_place(compiled, settings)
    sides = {"eager": _stepper(eager, batches), "compiled": _stepper(compiled, batches)}
    for step in sides.values():
        step(3)  # warm-up; the compiled side compiles here
    values = interleaved({name: (lambda s=s: s(STEPS)) for name, s in sides.items()}, repeats)
    return {
        "compile_gpt_step": Figure.of(
            ratios(values, "compiled", "eager"),
            "x eager",
            note="gpt_char GPT step, blocks compiled in place (inductor) / eager, CPU time",
            extra={"ms_per_step": {k: round(1e3 * min(v), 2) for k, v in values.items()}},
        )
    }
