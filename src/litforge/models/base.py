"""What litforge's LightningModules share: a net given as a built module, an optimizer and
an LR schedule given as partials (conf/model: `_target_` + `_partial_: true`), written the
way a lightning-hydra-template user writes them, plus how FSDP shards it and what a net of
adapters (LoRA on a Hugging Face model, `litforge.hf`) needs of its checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch

from litforge import hooks
from litforge.optim import accepts

OptimizerFactory = Callable[..., torch.optim.Optimizer]
SchedulerFactory = Callable[..., Any]


class LitforgeModule(L.LightningModule):
    """Subclasses take `net`, `optimizer` and `scheduler` in their constructor and call
    `self.save_hyperparameters(logger=False, ignore=["net"])`: the partials stay in
    `self.hparams`; litforge stores them in checkpoints as their config, so checkpoints
    still load with `torch.load(weights_only=True)`.

    optimizer: called with the trainable parameters (e.g. `litforge.optim.adamw`).
    scheduler: None for a constant LR, or called with the optimizer; a scheduler that takes
        `total_steps` and is not given it in the config gets the run's optimizer steps,
        read when first needed.
    scheduler_interval: "step" or "epoch", when Lightning steps the scheduler.
    """

    net: torch.nn.Module
    # The repeated block of `net` that trainer=fsdp shards one at a time (litforge.launch.fsdp);
    # None: the model cannot be sharded and trainer=fsdp refuses it (litforge.hooks.Shardable).
    shard_unit: type[torch.nn.Module] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "net" and isinstance(value, torch.nn.Module):
            # A net may name its own repeated block (a Hugging Face model's decoder layer).
            unit = hooks.shard_unit_of(value)
            if unit is not None:
                object.__setattr__(self, "shard_unit", unit)

    @property
    def strict_loading(self) -> bool:  # type: ignore[override]
        """Lightning's switch; unset, False for a net whose checkpoints hold its adapters
        only (the base model loads from its own directory)."""
        if self._strict_loading is not None:
            return bool(self._strict_loading)
        return not hooks.adapters_only(self.__dict__.get("_modules", {}).get("net"))

    @strict_loading.setter
    def strict_loading(self, strict_loading: bool) -> None:
        self._strict_loading = strict_loading

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A net of adapters records its base model's identity (directory and sha256)."""
        identity = hooks.base_identity_of(getattr(self, "net", None))
        if identity:
            from litforge.hf.lora import BASE_KEY  # only a Hugging Face net has an identity

            checkpoint[BASE_KEY] = identity

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Adapters load only onto the base they were trained on (one line naming both)."""
        net = getattr(self, "net", None)
        if isinstance(net, hooks.KnowsItsBase):
            from litforge.hf.lora import check_base  # only a Hugging Face net has one

            check_base(checkpoint, net, "the checkpoint")

    def configure_model(self) -> None:
        """Under a model-parallel strategy (trainer=fsdp, which sets `_device_mesh`):
        fully_shard each `shard_unit` block, then the net around them. Idempotent: a
        trainer.test after fit calls configure_model again."""
        mesh = self._device_mesh
        if mesh is None or self.shard_unit is None:
            return
        from torch.distributed.fsdp import FSDPModule, fully_shard

        if isinstance(self.net, FSDPModule):
            return
        for block in [m for m in self.net.modules() if isinstance(m, self.shard_unit)]:
            fully_shard(block, mesh=mesh["data_parallel"])
        fully_shard(self.net, mesh=mesh["data_parallel"])

    def configure_optimizers(self) -> Any:
        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = self.hparams.optimizer(params=params)
        factory: SchedulerFactory | None = self.hparams.get("scheduler")
        if factory is None:
            return optimizer
        if accepts(factory, "total_steps"):
            scheduler = factory(optimizer, total_steps=self._total_steps)
        else:
            scheduler = factory(optimizer)
        interval = self.hparams.get("scheduler_interval", "step")
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": interval},
        }

    def _total_steps(self) -> int:
        return int(self.trainer.estimated_stepping_batches)
