"""The training recipe: `python train.py [overrides]`, composed from conf/train.yaml."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from omegaconf import DictConfig

from litforge import build, console, run_record
from litforge.checkpointing.preemption import Preempted
from litforge.checkpointing.setup import setup as setup_checkpointing
from litforge.checks import check_config
from litforge.cli import (
    CONF_DIR,
    quote_numeric_choices,
    report_user_errors,
    silence_known_upstream_warnings,
)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, then test the best checkpoint; returns (and writes) the final metrics."""
    check_config(cfg)
    run_dir = Path(cfg.run_dir)
    console.show_config(cfg)
    run_record.write_start(run_dir, cfg)
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    checkpointing = setup_checkpointing(cfg)  # probes the store before any training
    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    loggers = build.build_loggers(cfg)
    callbacks = build.build_callbacks(cfg, with_logger=bool(loggers))
    callbacks += checkpointing.callbacks if checkpointing else []
    trainer = build.build_trainer(cfg, callbacks, loggers)

    effective_batch = cfg.data.batch_size * trainer.accumulate_grad_batches * trainer.world_size
    console.info(
        "effective batch size %d = data.batch_size %d x accumulate_grad_batches %d x %d processes",
        effective_batch, cfg.data.batch_size, trainer.accumulate_grad_batches, trainer.world_size,
    )  # fmt: skip
    for logger in trainer.loggers:
        logger.log_hyperparams({"effective_batch_size": effective_batch})

    resume_from = checkpointing.ckpt_path if checkpointing else cfg.get("ckpt_path")
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)
    metrics = {k: run_record.as_float(v) for k, v in trainer.callback_metrics.items()}
    best = best_url = None
    if checkpointing:
        checkpointing.saver.finish()  # every upload committed, or UploadsPending
        stopped_by = checkpointing.preemption.stopped_by
        if stopped_by:
            raise Preempted(stopped_by, trainer.global_step, str(checkpointing.store))
        best = checkpointing.saver.best_local_path()
        best_url = checkpointing.saver.best_url()

    if cfg.get("test", True):
        # The best checkpoint by the monitored metric; without one, the weights in memory.
        results = trainer.test(module, datamodule=datamodule, ckpt_path=best, weights_only=True)
        metrics.update({k: run_record.as_float(v) for k, v in results[0].items()})
        metrics["best_checkpoint"] = best_url

    metrics.update(
        precision_requested=str(cfg.trainer.precision),
        precision_effective=build.effective_precision(trainer),
        effective_batch_size=effective_batch,
        global_step=trainer.global_step,
        epoch=trainer.current_epoch,
    )
    if trainer.is_global_zero:
        run_record.write_metrics(run_dir, metrics)
        summary = ", ".join(
            f"{k}={v:.4f}"
            for k, v in sorted(metrics.items())
            if k.startswith(("val/", "test/")) and isinstance(v, float)
        )
        console.info("finished: %s", summary)
        console.info("run directory: %s", run_dir.resolve())
    return metrics


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    with report_user_errors():
        metrics = train(cfg)
    return metrics.get(cfg.get("optimized_metric"))


def main() -> None:
    """Console entry point (the root script calls this)."""
    sys.argv = quote_numeric_choices(sys.argv)
    silence_known_upstream_warnings()
    _hydra_main()
