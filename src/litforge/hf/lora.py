"""LoRA adapters on a Hugging Face causal LM, through peft: `model.net.lora={r, alpha,
dropout, target_modules}`. Only the adapters train; checkpoints hold the adapters and the
base model's identity (its directory and a sha256 of its files), not a second copy of it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from torch import nn

from litforge.errors import ConfigError

ADAPTER_MARK = "lora_"  # in the name of every adapter tensor peft adds
BASE_KEY = "litforge_base_model"  # the checkpoint's record of the base model


def add_adapters(model: nn.Module, lora: dict[str, Any]) -> nn.Module:
    """`model` wrapped by peft with LoRA adapters on `lora["target_modules"]`."""
    from peft import LoraConfig, get_peft_model

    targets = [str(t) for t in (lora.get("target_modules") or [])]
    linear = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    )
    unmatched = [t for t in targets if t not in linear]
    if not targets or unmatched:
        raise ConfigError(
            f"model.net.lora.target_modules={targets}: {', '.join(unmatched) or 'none given'} "
            f"match no module of the model; its linear layers are: {', '.join(linear)}"
        )
    r, alpha, dropout = lora.get("r", 8), lora.get("alpha", 16), lora.get("dropout", 0.0)
    for key, value, ok, valid in (("r", r, float(r) >= 1, "an integer >= 1"),
                                  ("alpha", alpha, float(alpha) > 0, "> 0"),
                                  ("dropout", dropout, 0 <= float(dropout) < 1, "in [0, 1)")):  # fmt: skip
        if not ok:
            raise ConfigError(f"model.net.lora.{key}={value} must be {valid}")
    config = LoraConfig(
        r=int(r),
        lora_alpha=float(alpha),
        lora_dropout=float(dropout),
        target_modules=targets,
        bias="none",
    )
    return get_peft_model(model, config)


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
    identity = getattr(net, "base_identity", lambda: None)()
    if saved and identity and saved.get("sha256") != identity["sha256"]:
        raise ConfigError(
            f"{what} holds LoRA adapters trained on {saved.get('pretrained')} (sha256 "
            f"{str(saved.get('sha256'))[:12]}), but model.net.pretrained={identity['pretrained']} "
            f"is another model (sha256 {identity['sha256'][:12]}); give the base it was trained on"
        )
