"""Next-token prediction around a net that maps token ids to logits (conf/model/gpt.yaml:
`litforge_examples.nets.gpt.GPT`); the loss is in nats per token."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from litforge import LitforgeModule, OptimizerFactory, SchedulerFactory
from litforge_examples.nets.gpt import Block


class LanguageModel(LitforgeModule):
    """net: (B, T) ids -> (B, T, vocab) logits; optimizer, scheduler, scheduler_interval:
    see `LitforgeModule`.

    gradient_checkpointing: recompute each transformer block in the backward pass,
    trading about one extra forward for activation memory (the net must have a
    `gradient_checkpointing` attribute, as `litforge_examples.nets.gpt.GPT` does).
    """

    consumes = "token windows"  # checked against the DataModule's `provides` before building
    shard_unit = Block  # trainer=fsdp shards (and gradient_checkpointing recomputes) per block

    def __init__(
        self,
        net: nn.Module,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        scheduler_interval: str = "step",
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=["net"])
        self.net = net
        if gradient_checkpointing:
            if not hasattr(net, "gradient_checkpointing"):
                raise ValueError(
                    f"gradient_checkpointing=true: {type(net).__name__} has no "
                    "gradient_checkpointing attribute to switch on"
                )
            net.gradient_checkpointing = True

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.net(idx)

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        inputs, targets = batch
        logits = self(inputs)
        # Cross-entropy in float32 even under bf16/fp16 autocast: the log-softmax over
        # the vocabulary is where low precision loses the most.
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train/loss", loss, on_step=True, on_epoch=True, sync_dist=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch), on_epoch=True, sync_dist=True, prog_bar=True)

    def test_step(self, batch, batch_idx: int) -> None:
        self.log("test/loss", self._loss(batch), on_epoch=True, sync_dist=True)

    def sample(
        self, prompt_ids: torch.Tensor, max_new_tokens: int, temperature: float, top_k: int | None
    ) -> torch.Tensor:
        """Continue a 1-D prompt; returns the prompt plus the new ids."""
        was_training = self.training
        self.eval()
        out = self.net.generate(
            prompt_ids[None].to(self.device), max_new_tokens, temperature, top_k
        )
        self.train(was_training)
        return out[0].cpu()
