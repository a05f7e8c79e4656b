"""TensorBoard after a resume: each step once.

A run killed after step K and resumed from its checkpoint at step N < K logs steps N..K
again; TensorBoard would show both. `TensorBoardResume` reopens the event writer of a
resumed fit with `purge_step=N`, which makes TensorBoard drop the earlier files' events
at steps >= N (the steps the resumed run logs again; the same cut as the CSV log's).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.trainer.states import TrainerFn

from litforge.extras import require

require(
    "tensorboard", "tensorboardX"
)  # its extra (pyproject.toml); missing: one line before any training


class TensorBoardResume(L.Callback):
    """conf/logger/tensorboard.yaml brings it along with the logger."""

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # trainer.test(ckpt_path=best) loads a checkpoint too: only a resumed fit purges.
        if trainer.state.fn != TrainerFn.FITTING or not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                if logger._experiment is not None:
                    logger._experiment.close()
                    logger._experiment = None
                logger._kwargs["purge_step"] = int(checkpoint["global_step"])
