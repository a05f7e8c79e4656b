"""The training recipe: `python train.py [overrides]`, composed from conf/train.yaml.

It names no capability. Each attaches through what the recipe builds anyway: the
config's callbacks (conf/callbacks: the memory budget, auto-microbatch, the out-of-memory
block, early stopping's best value), the callbacks checkpointing's setup attaches
(saves, resume checks, preemption, restore and hot start), `build_module` (model.freeze,
compile) and `build_trainer` (precision, processes, loggers). A callback's
`final_metrics(trainer)` goes into metrics.json. `litforge recipe copy` puts a copy of
this file into a project, which then owns its loop; the steps are `litforge.steps`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig

from litforge import entry_point, steps
from litforge.precision import requested_precision


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, then test the best checkpoint; returns (and writes) the final metrics."""
    steps.check_config(cfg)
    checkpoints = steps.setup_checkpoints(cfg)  # probes the store, picks the resume point
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = steps.build_datamodule(cfg)
    module = steps.build_module(cfg)
    facts = steps.RunFacts(cfg, checkpoints.location)  # to the loggers at the first step
    callbacks = [*checkpoints.attach(module), facts]
    trainer = steps.build_trainer(cfg, callbacks, datamodule, checkpoints)
    steps.show_config(cfg)  # once all of the above accepted it: no dump before an error
    steps.write_start(Path(cfg.run_dir), cfg)
    try:
        trainer.fit(
            module, datamodule=datamodule, ckpt_path=checkpoints.resume_from, weights_only=True
        )
        metrics = steps.floats(trainer.callback_metrics)
        best = checkpoints.finish(trainer)  # raises if preempted or uploads are still pending
    finally:
        # A fit that raised in this process (a notebook, a test) leaves the run to the next
        # call; the CLI's exit would release the locks anyway.
        checkpoints.release()
    if cfg.test:
        # The best checkpoint by the monitored metric; without one, the weights in memory.
        results = trainer.test(
            module,
            datamodule=datamodule,
            ckpt_path=best.local,
            weights_only=True,
            verbose=steps.interactive(),
        )
        metrics.update(steps.floats(results[0]))
    metrics.update(steps.final_metrics(trainer, requested_precision(cfg), best.url))
    steps.log_end(trainer, metrics)
    steps.write_metrics(Path(cfg.run_dir), metrics)
    return metrics


# The recipe as a Hydra entry point over the current directory's conf/, as train.py is.
main = entry_point(train, config_name="train")
