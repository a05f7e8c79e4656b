"""The training recipe: `python train.py [overrides]`, composed from conf/train.yaml.

It names no capability. Each attaches through what the recipe builds anyway: the
config's callbacks (conf/callbacks: the memory budget, auto-microbatch, the out-of-memory
block, early stopping's best value), the callbacks checkpointing's setup attaches
(saves, resume checks, preemption, restore and hot start), `build_module` (model.freeze,
compile) and `build_trainer` (precision, processes, loggers). A callback's
`final_metrics(trainer)` goes into metrics.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig

from litforge import build, checkpointing, console, run_record
from litforge.cli import entry_point
from litforge.tracking import lifecycle as tracking
from litforge.validation.checks import check_config


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, then test the best checkpoint; returns (and writes) the final metrics."""
    check_config(cfg)
    checkpoints = checkpointing.setup(cfg)  # probes the store, picks the resume point
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    facts = tracking.RunFacts(cfg, checkpoints.location)  # to the loggers at the first step
    callbacks = [*checkpoints.attach(module), facts]
    trainer = build.build_trainer(cfg, callbacks, datamodule, checkpoints)
    console.show_config(cfg)  # once all of the above accepted it: no dump before an error
    run_record.write_start(Path(cfg.run_dir), cfg)
    try:
        trainer.fit(
            module, datamodule=datamodule, ckpt_path=checkpoints.resume_from, weights_only=True
        )
        metrics = run_record.floats(trainer.callback_metrics)
        best = checkpoints.finish(trainer)  # raises if preempted or uploads are still pending
    finally:
        # A fit that raised in this process (a notebook, a test) leaves the run to the next
        # call; the CLI's exit would release the locks anyway.
        checkpoints.release()
    if cfg.get("test", True):
        # The best checkpoint by the monitored metric; without one, the weights in memory.
        results = trainer.test(
            module,
            datamodule=datamodule,
            ckpt_path=best.local,
            weights_only=True,
            verbose=console.interactive(),
        )
        metrics.update(run_record.floats(results[0]))
    metrics.update(run_record.final_metrics(trainer, str(cfg.trainer.precision), best.url))
    tracking.log_end(trainer, metrics)
    run_record.write_metrics(Path(cfg.run_dir), metrics)
    return metrics


main = entry_point(train, config_name="train")
