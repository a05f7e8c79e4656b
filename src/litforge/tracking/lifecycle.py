"""What every configured logger (conf/logger) is told about a run: at the start, the
resolved config and the facts of the run; at the end, the test metrics and the best
checkpoint's URL. Works with whichever loggers exist, and with none."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from litforge import run_record
from litforge.callbacks.effective_batch import EffectiveBatch
from litforge.checkpointing.direct_write import write_now
from litforge.launch import multirun
from litforge.precision import effective_precision, requested_precision
from litforge.tracking import run_ids

log = logging.getLogger("litforge")


def carry_ids(checkpoints: Any, run_dir: Path) -> None:
    """Before the loggers start. A fresh start (nothing to resume) starts new tracked runs;
    a resumed run on a machine without its old run directory (a lost spot instance, a
    remote checkpoint.dir) gets the ids kept beside its checkpoints back."""
    if rank_zero_only.rank != 0:
        return
    store = getattr(checkpoints, "store", None)
    for name in run_ids.ALL:
        local = run_dir / name
        if checkpoints.resume_from is None:
            local.unlink(missing_ok=True)
        elif store is not None and not local.exists():
            try:
                data = store.fs.cat_file(store.path(name))
            except FileNotFoundError:
                continue
            except Exception as err:  # noqa: BLE001 - a new tracked run, not a failed start
                log.warning("could not read %s beside the checkpoints: %s", name, err)
                continue
            run_dir.mkdir(parents=True, exist_ok=True)
            local.write_bytes(data)


def keep_ids(checkpoints: Any, run_dir: Path) -> None:
    """After the loggers started: their ids beside the checkpoints too (the store's set-aside
    of an old lineage moves them along with its checkpoints)."""
    store = getattr(checkpoints, "store", None)
    if rank_zero_only.rank != 0 or store is None:
        return
    if store.is_local and Path(store.root).resolve().is_relative_to(run_dir.resolve()):
        return  # the checkpoints live in the run directory: the ids are already there
    for name in run_ids.ALL:
        local = run_dir / name
        if local.is_file():
            try:
                write_now(store.fs, store.path(name), local.read_bytes())
            except Exception as err:  # noqa: BLE001 - training goes on; the run dir has them
                log.warning("could not keep %s beside the checkpoints: %s", name, err)


class RunFacts(EffectiveBatch):
    """The effective batch, said once before the first step, then the run's facts and its
    resolved config to every logger (`log_start`)."""

    def __init__(self, cfg: DictConfig, checkpoint_location: str | None) -> None:
        super().__init__(
            lambda trainer, size: log_start(
                trainer, cfg, trainer.lightning_module, size, checkpoint_location
            )
        )


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
        "precision_requested": requested_precision(cfg),
        "precision_effective": effective_precision(trainer),
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
            best = final.get("best_checkpoint")
            if best and getattr(logger, "litforge_checkpoint_reference", False):
                _reference_artifact(logger.experiment, str(best))
        elif "MLFlowLogger" in kinds:
            for key, value in final.items():
                logger.experiment.set_tag(logger.run_id, key, str(value))
        elif "TensorBoardLogger" in kinds:
            text = "\n".join(f"{k}: {v}" for k, v in final.items())
            logger.experiment.add_text("final", text, trainer.global_step)
            # The HPARAMS view needs metrics with the hyperparameters (those log_start gave):
            # hp/ tags, so the step-0 points Lightning writes for them join no curve.
            scores = {
                f"hp/{k}": float(v)
                for k, v in metrics.items()
                if k.startswith(("val/", "test/")) and isinstance(v, (int, float))
            }
            if scores:
                logger.log_hyperparams(dict(logger.hparams), metrics=scores)
            logger.experiment.flush()
    finish_active_runs(failed=False)  # the next run in this process starts its own


def _reference_artifact(run: Any, url: str) -> None:
    """The best checkpoint as a W&B model artifact that points at checkpoint.dir (a URI,
    no checksum: the bytes are neither read nor uploaded a second time)."""
    import wandb

    uri = url if "://" in url else Path(url).absolute().as_uri()
    artifact = wandb.Artifact(f"model-{run.id}", type="model")
    artifact.add_reference(uri, name=Path(url).name, checksum=False)
    run.log_artifact(artifact, aliases=["best"])


@contextlib.contextmanager
def runs_end_with_job() -> Iterator[None]:
    """Around one job of a multirun: its tracked runs end with it (see finish_active_runs)."""
    failed = True
    try:
        yield
        failed = False
    finally:
        if multirun.in_multirun():
            finish_active_runs(failed)


def finish_active_runs(failed: bool) -> None:
    """End the active W&B run (if this process has one) with the job's outcome: wandb.run
    is global, so the next job of an in-process sweep would otherwise log into it."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish(exit_code=1 if failed else 0)
