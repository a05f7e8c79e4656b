"""`trainer=fsdp`: every process holds 1/N of the weights, gradients and optimizer state.

Built on Lightning's `ModelParallelStrategy` with FSDP2 (`torch.distributed.fsdp.fully_shard`)
rather than its `FSDPStrategy` (FSDP1), because:

* FSDP2 runs on CPU processes over gloo, so the same sharded run is tested here;
  FSDP1 raises "FSDP needs a non-CPU accelerator device" in torch 2.13, and Lightning's
  `FSDPStrategy` refuses `accelerator=cpu` before that;
* FSDP2 keeps every parameter a DTensor of its own shape; FSDP1 flattens them, which would
  silently change `LitforgeModule.configure_optimizers`' decay groups (chosen by `p.dim()`);
* its checkpoints are torch distributed checkpoints (DCP): one file per rank plus metadata.

The wrapping unit is the model's `shard_unit` (the GPT's transformer `Block`): each block
is gathered just before its forward and freed after, so at most one block's full weights
are held at a time. `model.gradient_checkpointing=true` recomputes those same blocks in the
backward pass (the net's own per-block `torch.utils.checkpoint`), once: ModelParallelStrategy
has no checkpointing policy of its own to apply it a second time.
"""

from __future__ import annotations

import datetime
from typing import Any

import lightning as L
from hydra.utils import get_class
from lightning.pytorch.strategies import ModelParallelStrategy
from omegaconf import DictConfig, OmegaConf

from litforge import hooks
from litforge.errors import ConfigError
from litforge.launch.ddp import COLLECTIVE_TIMEOUT_S, RENDEZVOUS_TIMEOUT_S, BoundedRendezvous

STRATEGY_NAME = "fsdp"  # trainer.strategy=fsdp (trainer=fsdp): run as ShardedStrategy


class ShardedStrategy(BoundedRendezvous, ModelParallelStrategy):
    """Lightning's ModelParallelStrategy as plain FSDP: one data-parallel dimension over every
    process of every node (no tensor parallelism), sharded checkpoints, and litforge's bounded
    rendezvous and collectives (litforge.launch.ddp)."""

    def __init__(
        self,
        rendezvous_timeout_s: float = RENDEZVOUS_TIMEOUT_S,
        collective_timeout_s: float = COLLECTIVE_TIMEOUT_S,
    ) -> None:
        timeout = datetime.timedelta(seconds=float(collective_timeout_s))
        super().__init__(save_distributed_checkpoint=True, timeout=timeout)
        self.rendezvous_timeout_s = float(rendezvous_timeout_s)

    def setup_environment(self) -> None:
        # Every process is one shard; Lightning's "auto" would shard across nodes only.
        self._data_parallel_size = self.num_nodes * self.num_processes
        self._tensor_parallel_size = 1
        super().setup_environment()

    def _setup_distributed(self) -> None:
        self._meet(super()._setup_distributed)


def is_fsdp_run(cfg: DictConfig) -> bool:
    """Whether `cfg.trainer.strategy` is litforge's FSDP (see is_fsdp_strategy)."""
    return is_fsdp_strategy(cfg.trainer.get("strategy"))


def is_fsdp_strategy(strategy: Any) -> bool:
    """`fsdp` (conf/trainer/fsdp.yaml), a `_target_` node naming ShardedStrategy or a
    subclass of it, or such a strategy object. The one place that asks."""
    if isinstance(strategy, str):
        return strategy == STRATEGY_NAME
    if OmegaConf.is_dict(strategy) and "_target_" in strategy:
        try:
            target = get_class(str(strategy._target_))
        except (ImportError, ValueError, AttributeError):
            return False  # validation.targets says what is wrong with it
        return issubclass(target, ShardedStrategy)
    return isinstance(strategy, ShardedStrategy)


def is_sharded(strategy: Any) -> bool:
    """Whether a trainer's strategy writes sharded (directory) checkpoints."""
    return isinstance(strategy, ShardedStrategy)


def check_shardable(module: L.LightningModule) -> None:
    """Before any process starts: the model must name the block class FSDP wraps."""
    unit = hooks.shard_unit_of(module)
    name = f"{type(module).__module__}.{type(module).__qualname__}"
    if type(module).configure_model is L.LightningModule.configure_model:
        raise ConfigError(
            f"trainer=fsdp: model={name} is a plain LightningModule, whose configure_model "
            "shards nothing. Subclass litforge.models.base.LitforgeModule (its `net` and "
            "`shard_unit`, the repeated block, are what FSDP shards), write a configure_model "
            "that calls torch's fully_shard, or use trainer=ddp"
        )
    if unit is None:
        raise ConfigError(
            f"trainer=fsdp: model={name} names no block class to shard (its `shard_unit` is "
            "None), so FSDP would gather the whole model at once and save nothing over DDP. "
            "Use trainer=ddp for it, or set `shard_unit` on the model class to its repeated "
            "block (as LanguageModel does with litforge_examples.nets.gpt.Block)"
        )
    if not any(isinstance(m, unit) for m in module.modules()):
        raise ConfigError(
            f"trainer=fsdp: model={name} has no {unit.__qualname__} module (its `shard_unit`) "
            "to shard; set `shard_unit` to a class its net is built of"
        )
