"""An exponential moving average of the weights: Lightning's `EMAWeightAveraging` with its
arguments checked, and refused under sharding, which Lightning's weight averaging does
not support (it keeps one whole, unsharded copy of the model).

Which weights each part uses (Lightning's behaviour): training updates the model's own
weights; validation runs on the average; checkpoints hold the average as `state_dict` and
the trained weights as `current_model_state`, so a resumed run continues both exactly;
when fit ends the average replaces the weights, so the test after fit and `eval.py` (which
loads `state_dict`) use the average.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EMAWeightAveraging
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

from litforge.errors import ConfigError

KEY = "callbacks.ema"
# Lightning warns for every module that overrides configure_model (LitforgeModule does, to
# shard under trainer=fsdp, which this callback refuses): nothing is sharded here.
_CONFIGURE_MODEL_WARNING = (
    r".*WeightAveraging callback with a model that overrides the configure_model.*"
)


class EMA(EMAWeightAveraging):
    def __init__(self, decay: float = 0.999, update_every_n_steps: int = 1,
                 update_starting_at_step: int | None = None, **kwargs: Any) -> None:  # fmt: skip
        ok = isinstance(decay, (int, float)) and not isinstance(decay, bool)
        if not ok or not math.isfinite(decay) or not 0 < decay < 1:
            raise ConfigError(
                f"{KEY}.decay={decay!r} must be in (0, 1), e.g. 0.999 (the share of the "
                "average kept at each update)"
            )
        if (
            isinstance(update_every_n_steps, bool)
            or not isinstance(update_every_n_steps, int)
            or update_every_n_steps < 1
        ):
            raise ConfigError(
                f"{KEY}.update_every_n_steps={update_every_n_steps!r} must be an integer >= 1"
            )
        super().__init__(decay=float(decay), update_every_n_steps=update_every_n_steps,
                         update_starting_at_step=update_starting_at_step, **kwargs)  # fmt: skip

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if isinstance(trainer.strategy, (FSDPStrategy, ModelParallelStrategy)):
            raise ConfigError(
                f"{KEY} with a sharded strategy (trainer=fsdp): Lightning's weight averaging "
                "keeps a whole unsharded copy of the model and does not support sharded models; "
                f"use trainer=ddp, or drop the average ({KEY}=null)"
            )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_CONFIGURE_MODEL_WARNING)
            super().setup(trainer, pl_module, stage)
