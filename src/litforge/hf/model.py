"""A Hugging Face causal LM as a net: (B, T) token ids -> (B, T, vocab) logits.

`pretrained` is a directory written by `save_pretrained` (a hub id works where the machine
has internet; no test needs one). The decoder layer (from the model's own
`_no_split_modules`) is the FSDP shard unit, and `gradient_checkpointing` switches the
model's own checkpointing (`gradient_checkpointing_enable`, non-reentrant).
Needs the `hf` extra: pip install 'litforge[hf]'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from litforge import console
from litforge.errors import ConfigError
from litforge.hf.lora import add_adapters, base_identity, keep_adapters


def check_pretrained(pretrained: str | None, key: str = "model.net.pretrained") -> None:
    """A local path must be a Hugging Face model directory; anything else is a hub id."""
    if not pretrained:
        raise ConfigError(
            f"{key} is not set: give a directory written by save_pretrained() (config.json and "
            "the weights), or a hub id such as org/name"
        )
    path = Path(pretrained).expanduser()
    looks_local = (
        path.exists() or pretrained.startswith((".", "/", "~")) or pretrained.count("/") > 1
    )
    if looks_local and not (path / "config.json").is_file():
        what = "does not exist" if not path.exists() else "has no config.json"
        raise ConfigError(
            f"{key}={pretrained} {what}: give a directory written by save_pretrained() "
            "(config.json and the weights), or a hub id such as org/name"
        )


class HFCausalLM(nn.Module):
    """lora: {r, alpha, dropout, target_modules} trains LoRA adapters only (peft), and
    checkpoints hold just them (`litforge.hf.lora`)."""

    def __init__(self, pretrained: str | None, lora: dict[str, Any] | None = None) -> None:
        super().__init__()
        check_pretrained(pretrained)
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        if not console.interactive():
            hf_logging.disable_progress_bar()  # carriage-return bars garble logs
        self.pretrained = pretrained
        # from_pretrained returns the model in eval mode; Lightning switches modes per stage.
        self.model = AutoModelForCausalLM.from_pretrained(pretrained).train()
        self.vocab_size = self.model.get_input_embeddings().num_embeddings
        self.shard_unit = decoder_layer(self.model)
        self.adapters_only = bool(lora)  # checkpoints without the base weights
        if lora:
            self.model = add_adapters(self.model, dict(lora))
            self._register_state_dict_hook(keep_adapters)

    def base_identity(self) -> dict[str, str] | None:
        """What adapter-only checkpoints were trained on (None: they hold every weight)."""
        if not self.adapters_only:
            return None
        if self._identity is None:
            self._identity = base_identity(str(self.pretrained))
        return self._identity

    _identity: dict[str, str] | None = None

    def merged(self) -> nn.Module:
        """The plain transformers model, adapters merged into its weights (a copy)."""
        import copy

        model = copy.deepcopy(self.model)
        return model.merge_and_unload() if self.adapters_only else model

    @property
    def gradient_checkpointing(self) -> bool:
        return bool(getattr(self.model, "is_gradient_checkpointing", False))

    @gradient_checkpointing.setter
    def gradient_checkpointing(self, on: bool) -> None:
        if on:
            self.model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        else:
            self.model.gradient_checkpointing_disable()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=idx, use_cache=False).logits


def decoder_layer(model: nn.Module) -> type[nn.Module] | None:
    """The class the model names as not to be split (its decoder layer)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return next((type(m) for m in model.modules() if type(m).__name__ in names), None)
