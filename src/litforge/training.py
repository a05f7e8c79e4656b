"""The training recipe: `python train.py [overrides]`, composed from conf/train.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig

from litforge import build, checkpointing, compiling, console, run_record
from litforge.callbacks.auto_microbatch import AutoMicrobatch
from litforge.callbacks.effective_batch import EffectiveBatch
from litforge.checkpointing import restore
from litforge.cli import entry_point
from litforge.models.freeze import KEY as FREEZE_KEY
from litforge.models.freeze import freeze
from litforge.tracking import lifecycle as tracking
from litforge.validation.checks import check_config


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, then test the best checkpoint; returns (and writes) the final metrics."""
    check_config(cfg)
    checkpoints = checkpointing.setup(cfg)  # probes the store, picks the resume point
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    hot_start = []
    if checkpoints.restore is not None:  # restore.mode=finetune | hotstart
        restore.load_weights(module, checkpoints.restore)
        if checkpoints.restore.mode == "hotstart":
            hot_start.append(restore.HotStart(checkpoints.restore))
    freeze(module, cfg.model.get(FREEZE_KEY))
    settings = compiling.options(cfg)  # a missing compiler is one line before training
    run_dir = Path(cfg.run_dir)
    tracking.carry_ids(checkpoints, run_dir)  # a resumed run continues its tracked runs
    shrinking = [AutoMicrobatch()] if cfg.get("microbatch", {}).get("auto") else []
    # The run's facts reach the loggers once fit has the effective batch off the train loader.
    batch = EffectiveBatch(
        lambda trainer, size: tracking.log_start(trainer, cfg, module, size, checkpoints.location)
    )
    extra = [*checkpoints.callbacks, *shrinking, *hot_start, batch]
    trainer = build.build_trainer(cfg, extra, datamodule)
    if shrinking:
        AutoMicrobatch.check(trainer, datamodule)
    if settings is not None:
        compiling.compile_in_place(module, settings)
    tracking.keep_ids(checkpoints, run_dir)
    console.show_config(cfg)  # once all of the above accepted it: no dump before an error
    run_record.write_start(run_dir, cfg)

    try:
        try:
            trainer.fit(
                module, datamodule=datamodule, ckpt_path=checkpoints.resume_from, weights_only=True
            )
        except torch.OutOfMemoryError as err:
            explained = _explain_out_of_memory(trainer, err)
            if explained is None:
                raise
            raise explained from err
        metrics = run_record.floats(trainer.callback_metrics)
        metrics.update(_best_of_early_stopping(trainer, cfg))
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

    metrics.update(
        best_checkpoint=best.url,
        precision_requested=str(cfg.trainer.precision),
        precision_effective=build.effective_precision(trainer),
        effective_batch_size=batch.size,
        global_step=trainer.global_step,
        epoch=trainer.current_epoch,
    )
    tracking.log_end(trainer, metrics)
    run_record.write_metrics(run_dir, metrics)
    return metrics


def _best_of_early_stopping(trainer: L.Trainer, cfg: DictConfig) -> dict[str, float]:
    """A run early stopping ended reports the best value of its monitored metric (its last
    validations were the ones without improvement)."""
    from lightning.pytorch.callbacks import EarlyStopping

    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, EarlyStopping) and callback.wait_count >= callback.patience:
            best = float(callback.best_score)
            if abs(best) != float("inf"):
                console.info("early stopping: stopped at step %d; best %s=%.6g",
                             trainer.global_step, callback.monitor, best)  # fmt: skip
                return {str(callback.monitor): best}
    return {}


def _explain_out_of_memory(trainer: L.Trainer, err: BaseException) -> Exception | None:
    """The toolkit's out-of-memory block; None in a project made without the toolkit."""
    try:
        from litforge.toolkit.budget import oom
    except ImportError:
        return None
    return oom.explain(trainer, err)


main = entry_point(train, config_name="train")
