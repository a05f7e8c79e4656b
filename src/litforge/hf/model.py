"""A Hugging Face causal LM as a net: (B, T) token ids -> (B, T, vocab) logits.

`pretrained` is a directory written by `save_pretrained` (a hub id works where the machine
has internet; no test needs one). The decoder layer (from the model's own
`_no_split_modules`) is the FSDP shard unit, and `gradient_checkpointing` switches the
model's own checkpointing (`activation_checkpointing_enable`, non-reentrant).
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
from litforge.hf.quantize import check_quantize, plan_4bit, quantized


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


def check_weights(pretrained: str, key: str = "model.net.pretrained") -> None:
    """A local directory to train from must hold weights, not only a config."""
    path = Path(pretrained).expanduser()
    if path.is_dir() and not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ConfigError(
            f"{key}={pretrained} has config.json but no weights (*.safetensors or *.bin): "
            "training needs the weights; python -m litforge.budget and python -m "
            "litforge.plan need only the config"
        )


class HFCausalLM(nn.Module):
    """lora: {r, alpha, dropout, target_modules} trains LoRA adapters only (peft), and
    checkpoints hold just them (`litforge.hf.lora`). quantize: "4bit" loads the base
    weights in 4 bits (QLoRA; CUDA and the `qlora` extra)."""

    def __init__(
        self,
        pretrained: str | None,
        lora: dict[str, Any] | None = None,
        quantize: str | None = None,
    ) -> None:
        super().__init__()
        check_pretrained(pretrained)
        meta = torch.get_default_device().type == "meta"
        check_quantize(quantize, lora, planning=meta)
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        if not console.interactive():
            hf_logging.disable_progress_bar()  # carriage-return bars garble logs
        self.pretrained = pretrained
        if meta:
            # The memory budget and the plan build it without memory: the config is enough
            # (a directory of config.json alone plans a model too large to download).
            from transformers import AutoConfig

            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(pretrained))
            if quantize:
                plan_4bit(model)
        else:
            check_weights(pretrained)
            model = AutoModelForCausalLM.from_pretrained(pretrained, **quantized(quantize))
        # from_pretrained returns the model in eval mode; Lightning switches modes per stage.
        self.model = model.train()
        self.vocab_size = self.model.get_input_embeddings().num_embeddings
        self.shard_unit = decoder_layer(self.model)
        self.adapters_only = bool(lora)  # checkpoints without the base weights
        if lora:
            if quantize and not meta:
                from peft import prepare_model_for_kbit_training

                # Norms to float32, inputs that require grad (for checkpointing through
                # frozen 4-bit layers); it leaves checkpointing itself to the setter.
                self.model = prepare_model_for_kbit_training(
                    self.model, use_gradient_checkpointing=False
                )
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
        base = self.model.get_base_model() if self.adapters_only else self.model
        return bool(getattr(base, "is_activation_checkpointing", False))

    @gradient_checkpointing.setter
    def gradient_checkpointing(self, on: bool) -> None:
        # transformers 5 names it activation checkpointing (the gradient_ names warn).
        if on:
            self.model.activation_checkpointing_enable({"use_reentrant": False})
        else:
            self.model.activation_checkpointing_disable()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=idx, use_cache=False).logits

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
    ) -> torch.Tensor:
        """Sample up to `max_new_tokens` ids after the (B, T) prompt `idx` with the model's
        own `generate` (the GPT example's signature: what eval.py's `sample.*` calls); it
        stops early at the model's end-of-sequence token."""
        eos = self.model.generation_config.eos_token_id
        return self.model.generate(
            input_ids=idx,
            attention_mask=torch.ones_like(idx),
            max_new_tokens=max_new_tokens,
            do_sample=True,
            temperature=max(temperature, 1e-6),
            top_k=top_k or 0,  # 0: no top-k (transformers' default would be 50)
            pad_token_id=eos[0] if isinstance(eos, list) else eos,
        )


def decoder_layer(model: nn.Module) -> type[nn.Module] | None:
    """The class the model names as not to be split (its decoder layer)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return next((type(m) for m in model.modules() if type(m).__name__ in names), None)
