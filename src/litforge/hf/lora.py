"""LoRA adapters on a Hugging Face causal LM, through peft: `model.net.lora={r, alpha,
dropout, target_modules}`. Only the adapters train; checkpoints hold the adapters and the
base model's identity (its directory and a sha256 of its files), not a second copy of it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from torch import nn

from litforge import hooks
from litforge.errors import ConfigError

ADAPTER_MARK = "lora_"  # in the name of every adapter tensor peft adds
BASE_KEY = "litforge_base_model"  # the checkpoint's record of the base model


# litforge's short names for LoraConfig's fields; any other LoraConfig field passes as is.
_OWN_NAMES = {"alpha": "lora_alpha", "dropout": "lora_dropout"}


def add_adapters(model: nn.Module, lora: dict[str, Any]) -> nn.Module:
    """`model` wrapped by peft with LoRA adapters on `lora["target_modules"]`."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.tuners_utils import BaseTunerLayer

    settings = lora_settings(lora)
    targets = [str(t) for t in settings.get("target_modules") or []]
    if not targets:
        raise ConfigError(
            "model.net.lora.target_modules is not set: name the layers to adapt, e.g. "
            f"[q_proj, v_proj]; this model's are: {', '.join(adaptable(model))}"
        )
    r, alpha = settings.setdefault("r", 8), settings.setdefault("lora_alpha", 16)
    dropout = settings.setdefault("lora_dropout", 0.0)
    for key, value, ok, valid in (("r", r, float(r) >= 1, "an integer >= 1"),
                                  ("alpha", alpha, float(alpha) > 0, "> 0"),
                                  ("dropout", dropout, 0 <= float(dropout) < 1, "in [0, 1)")):  # fmt: skip
        if not ok:
            raise ConfigError(f"model.net.lora.{key}={value} must be {valid}")
    candidates = adaptable(model)
    missing = [t for t in targets if t not in candidates]
    if missing:
        raise ConfigError(
            f"model.net.lora.target_modules={targets}: {', '.join(missing)} match no module "
            f"of the model; its layers LoRA adapts are: {', '.join(candidates)}"
        )
    settings.update(r=int(r), lora_alpha=float(alpha), lora_dropout=float(dropout))
    settings.setdefault("bias", "none")
    settings["target_modules"] = targets
    try:
        config = LoraConfig(**settings)
        wrapped = get_peft_model(model, config)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model.net.lora: peft refuses {settings}: {err}") from None
    adapted = {n.rsplit(".", 1)[-1] for n, m in wrapped.named_modules()
               if isinstance(m, BaseTunerLayer)}  # fmt: skip
    if missing := [t for t in targets if t not in adapted]:
        raise ConfigError(f"model.net.lora.target_modules: peft adapted none of {missing}")
    return wrapped


def lora_settings(lora: dict[str, Any]) -> dict[str, Any]:
    """`model.net.lora` as LoraConfig's keyword arguments; an unknown key is one line."""
    import dataclasses
    import difflib

    from peft import LoraConfig

    fields = {f.name for f in dataclasses.fields(LoraConfig) if f.init}
    settings = {}
    for key, value in lora.items():
        name = _OWN_NAMES.get(key, key)
        if name not in fields:
            near = difflib.get_close_matches(key, [*_OWN_NAMES, *sorted(fields)], n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigError(
                f"model.net.lora.{key} is not a LoRA setting{hint}; valid: r, alpha, dropout, "
                "target_modules, or another field of peft's LoraConfig"
            )
        settings[name] = value
    return settings


def adaptable(model: nn.Module) -> list[str]:
    """The names of the layers peft's LoRA adapts, as its dispatch does: Linear, Embedding,
    Conv1d/2d/3d, MultiheadAttention and transformers' Conv1D (GPT-2's projections)."""
    kinds: tuple[type, ...] = (nn.Linear, nn.Embedding, nn.Conv1d, nn.Conv2d, nn.Conv3d,
                               nn.MultiheadAttention)  # fmt: skip
    try:
        from transformers.pytorch_utils import Conv1D

        kinds = (*kinds, Conv1D)
    except ImportError:
        pass
    return sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                   if n and isinstance(m, kinds)})  # fmt: skip


def keep_adapters(module: nn.Module, state: dict[str, Any], prefix: str, *_: Any) -> None:
    """A state_dict hook: only the adapters' tensors go into checkpoints."""
    for key in [k for k in state if k.startswith(prefix) and ADAPTER_MARK not in k]:
        del state[key]


def base_identity(pretrained: str) -> dict[str, str]:
    """The base model's directory and a sha256 over its files' names and contents (its
    config and weights): what the adapters were trained on."""
    digest = hashlib.sha256()
    root = Path(pretrained)
    for path in sorted(
        p for p in root.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors", ".bin")
    ):
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as file:
            for block in iter(lambda file=file: file.read(1 << 24), b""):
                digest.update(block)
    return {"pretrained": str(pretrained), "sha256": digest.hexdigest()}


def check_base(checkpoint: dict[str, Any], net: nn.Module, what: str) -> None:
    """Adapters load only onto the base they were trained on: one line naming both."""
    saved = checkpoint.get(BASE_KEY)
    identity = hooks.base_identity_of(net)
    if not (saved and identity):
        return
    if saved.get("sha256") == identity["sha256"]:
        if saved.get("pretrained") != identity["pretrained"]:
            from litforge import console

            console.info(
                "the base model moved: %s -> %s (the same content, sha256 %s)",
                saved.get("pretrained"), identity["pretrained"], identity["sha256"][:12],
            )  # fmt: skip
        return
    if saved.get("sha256") != identity["sha256"]:
        raise ConfigError(
            f"{what} holds LoRA adapters trained on {saved.get('pretrained')} (sha256 "
            f"{str(saved.get('sha256'))[:12]}), but model.net.pretrained={identity['pretrained']} "
            f"is another model (sha256 {identity['sha256'][:12]}); give the base it was trained on"
        )
