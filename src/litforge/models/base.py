"""What every litforge LightningModule shares: AdamW, warmup + cosine LR, a class tag, and a
poisoned batch on request (for testing the numerics watch)."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch


def model_class_name(module: type) -> str:
    return f"{module.__module__}.{module.__qualname__}"


class LitforgeModule(L.LightningModule):
    """Subclasses call `save_hyperparameters()` with plain dicts only (numbers, strings,
    lists), so checkpoints load with `torch.load(weights_only=True)`.

    optimizer: keyword arguments of `torch.optim.AdamW` (lr, betas, eps, weight_decay).
    scheduler: None for a constant LR, or {warmup_steps, min_lr_ratio} for linear warmup
    followed by cosine decay to `min_lr_ratio * lr` at the last optimizer step.
    """

    net: torch.nn.Module
    # The repeated block of `net` that trainer=fsdp shards one at a time (litforge.fsdp);
    # None: the model cannot be sharded and trainer=fsdp refuses it.
    shard_unit: type[torch.nn.Module] | None = None

    def configure_model(self) -> None:
        mesh = self._device_mesh  # set only by a model-parallel strategy (trainer=fsdp)
        if mesh is not None:
            from litforge.fsdp import shard

            shard(self, mesh["data_parallel"])

    def poison(self, step: int | None) -> None:
        """`model.poison_step`: multiply the net's output by inf in the training batch of
        global step `step`, so that batch's loss and every gradient are non-finite (what the
        numerics watch, callbacks.numerics, must catch). None changes nothing.

        Set by `litforge.build.build_module` rather than each model's constructor, so every
        LitforgeModule has it; recorded in the hyperparameters (a plain int or None).
        """
        self.hparams["poison_step"] = step
        if step is not None:
            self.net.register_forward_hook(self._poison_output)

    def _poison_output(self, net: torch.nn.Module, args: Any, output: torch.Tensor) -> Any:
        trainer = self._trainer  # None outside a Trainer (eval.py's sampling)
        step = None if trainer is None else trainer.global_step
        if self.training and step == self.hparams.poison_step:
            return output * float("inf")
        return None

    def configure_optimizers(self) -> Any:
        opt_kwargs = dict(self.hparams.optimizer)
        weight_decay = opt_kwargs.pop("weight_decay", 0.0)
        params = [p for p in self.parameters() if p.requires_grad]
        # Decay matrices only; biases, norms and gains stay undecayed (GPT-2 practice).
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, **opt_kwargs)
        sched = self.hparams.get("scheduler")
        if not sched:
            return optimizer
        warmup = int(sched.get("warmup_steps", 0))
        floor = float(sched.get("min_lr_ratio", 0.1))
        total: list[int] = []  # filled on first use, see below

        def factor(step: int) -> float:
            if step <= warmup:
                return min(1.0, (step + 1) / warmup) if warmup else 1.0
            # Asked for only once training runs: calling estimated_stepping_batches inside
            # configure_optimizers builds the train iterator before a resumed run's loop
            # state is restored, and the resumed epoch would replay epoch 0's order.
            if not total:
                total.append(max(1, int(self.trainer.estimated_stepping_batches)))
            progress = min(1.0, (step - warmup) / max(1, total[0] - warmup))
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Lets eval.py refuse a checkpoint of another model with a clear message.
        checkpoint["litforge_model_class"] = model_class_name(type(self))
