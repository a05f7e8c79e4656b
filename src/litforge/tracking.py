"""What every configured logger (conf/logger) is told about a run: at the start, the
resolved config and the facts of the run; at the end, the test metrics and the best
checkpoint's URL. Works with whichever loggers exist, and with none."""

from __future__ import annotations

import sys
from typing import Any

import lightning as L
from omegaconf import DictConfig, OmegaConf

from litforge import build, run_record


def log_start(
    trainer: L.Trainer,
    cfg: DictConfig,
    module: L.LightningModule,
    effective_batch: int,
    checkpoint_location: str | None,
) -> None:
    """The resolved config (nested; loggers flatten it as they need) and the run's facts."""
    if not trainer.loggers:
        return
    params = sum(p.numel() for p in module.parameters())
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    facts = {
        "params_total": params,
        "params_trainable": trainable,
        "effective_batch_size": effective_batch,
        "precision_requested": str(cfg.trainer.precision),
        "precision_effective": build.effective_precision(trainer),
        **run_record.git_state(),
        "run_dir": str(cfg.run_dir),
        "checkpoint_location": checkpoint_location,
    }
    config = OmegaConf.to_container(cfg, resolve=True)
    for logger in trainer.loggers:
        logger.log_hyperparams({"run": facts, "config": config})


def log_end(trainer: L.Trainer, metrics: dict[str, Any]) -> None:
    """Final values as run summary (W&B), tags (MLflow) or text (TensorBoard); the CSV
    logger has metrics.json beside it."""
    final = {k: v for k, v in metrics.items() if k.startswith("test/") or k == "best_checkpoint"}
    for logger in trainer.loggers if trainer.is_global_zero else []:
        kinds = {cls.__name__ for cls in type(logger).__mro__}  # no import of absent extras
        if "WandbLogger" in kinds:
            logger.experiment.summary.update(final)
        elif "MLFlowLogger" in kinds:
            for key, value in final.items():
                logger.experiment.set_tag(logger.run_id, key, str(value))
        elif "TensorBoardLogger" in kinds:
            text = "\n".join(f"{k}: {v}" for k, v in final.items())
            logger.experiment.add_text("final", text, trainer.global_step)
            logger.experiment.flush()
    finish_active_runs(failed=False)  # the next run in this process starts its own


def finish_active_runs(failed: bool) -> None:
    """End the active W&B run (if this process has one) with the job's outcome: wandb.run
    is global, so the next job of an in-process sweep would otherwise log into it."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish(exit_code=1 if failed else 0)
