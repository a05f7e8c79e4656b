"""Is FP8 safe for this model: gpt_char trained in fp8 and in bf16-mixed for the same
steps from the same seed, on this CPU (torchao's float8 runs through torch._scaled_mm).

The figure is the gap in validation loss, fp8 minus bf16, in nats per character, and their
ratio: with precision=fp8 as shipped (the output projection lm_head in bf16) and, reported,
with lm_head in float8 too. A second bf16 run from another seed gives the noise floor the
gap is held against: a gap under the seed-to-seed spread is no evidence that float8
changed what the model learned. This measures safety, not speed: a CPU has no FP8 units (benchmarks/gpu.sh times
fp8 on a card).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence

import lightning as L

from benchmarks.harness import scratch_dir
from benchmarks.stats import Figure
from litforge import build
from litforge.cli import compose

STEPS = 100  # of gpt_char's 800: past the steep start; ~3 min for the four runs here
TOLERANCE_NATS = 0.05  # docs/precision-and-memory.md, "FP8": why this bound
# Every Linear of gpt_char is 64-256 wide: let each aligned one train in float8, but the
# output projection (precision=fp8's fp8_skip=[lm_head]); FP8_ALL puts that one in too.
FP8 = ["precision=fp8", "precision.fp8_min_dim=16"]
FP8_ALL = [*FP8, "precision.fp8_skip=null"]
SHORT = [f"trainer.max_steps={STEPS}", f"trainer.val_check_interval={STEPS}",
         "trainer.limit_val_batches=16", "test=false", "checkpoint=none", "logger=none",
         "callbacks.memory_budget=null", "trainer.deterministic=true"]  # fmt: skip


def val_loss(overrides: Sequence[str], seed: int, steps: int = STEPS) -> float:
    """gpt_char's validation loss after `steps` steps with these overrides."""
    run_dir = scratch_dir()
    short = [s.replace(f"={STEPS}", f"={steps}") for s in SHORT]
    cfg = compose(["experiment=gpt_char", *short, f"seed={seed}", *overrides], run_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule, module = build.build_datamodule(cfg), build.build_module(cfg)
    trainer = build.build_trainer(cfg, [], datamodule)
    trainer.fit(module, datamodule=datamodule)
    loss = float(trainer.validate(module, datamodule=datamodule, verbose=False)[0]["val/loss"])
    shutil.rmtree(run_dir, ignore_errors=True)
    return loss


def measure() -> dict[str, Figure]:
    bf16 = val_loss(["precision=bf16-mixed"], seed=1)
    fp8 = val_loss(FP8, seed=1)
    fp8_all = val_loss(FP8_ALL, seed=1)
    other_seed = val_loss(["precision=bf16-mixed"], seed=2)
    note = f"experiment=gpt_char, {STEPS} steps, seed 1, validation on 16 batches"
    extra = {"bf16_val_loss": round(bf16, 4), "fp8_val_loss": round(fp8, 4),
             "fp8_all_layers_val_loss": round(fp8_all, 4),
             "bf16_seed2_val_loss": round(other_seed, 4)}  # fmt: skip
    return {
        "fp8_bf16_val_loss_gap": Figure.of(
            [abs(fp8 - bf16)], "nats/char", f"<= {TOLERANCE_NATS}",
            note=f"|fp8 - bf16| validation loss; {note}", extra=extra,
        ),
        "fp8_bf16_val_loss_ratio": Figure.of(
            [fp8 / bf16], "x", None, note=f"fp8 / bf16 validation loss; {note}", extra=extra
        ),
        "fp8_all_layers_val_loss_gap": Figure.of(
            [abs(fp8_all - bf16)], "nats/char", None, extra=extra,
            note=f"the same with lm_head in float8 too (precision.fp8_skip=null); {note}",
        ),
        "bf16_seed_spread": Figure.of(
            [abs(other_seed - bf16)], "nats/char", None,
            note="|bf16 seed 2 - bf16 seed 1| validation loss: the noise floor of the gap",
        ),
    }  # fmt: skip
