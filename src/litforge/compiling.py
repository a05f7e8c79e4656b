"""`compile.enabled=true`: torch.compile the model in place, block by block.

In place (`nn.Module.compile`) rather than `torch.compile(module)`: the module keeps its
own class and parameter names, so checkpoints carry no `_orig_mod.` prefixes, and a
compiled run's checkpoint loads uncompiled (eval.py, a resume, consolidate) and the other
way round. A model with a repeated block (`shard_unit`, as the GPT's `Block`) compiles each
block, once for all of them, as torchtitan does; under trainer=fsdp that happens at the
first step, after sharding. Any other model compiles whole.
"""

from __future__ import annotations

import shutil
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from litforge import console, hooks
from litforge.compiling_settings import CompileSettings
from litforge.errors import ConfigError

KEY = "compile"


def options(cfg: DictConfig) -> dict[str, Any] | None:
    """torch.compile's keyword arguments from `cfg.compile`; None when it is off. A backend
    that does not exist, or inductor without a C compiler, is one line."""
    settings = CompileSettings.of(cfg)
    if not settings.enabled:
        return None
    backend = settings.backend
    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise ConfigError(
            f"{KEY}.backend={backend!r} is not a torch.compile backend; use one of: {', '.join(known)}"
        )
    if backend == "inductor" and not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        raise ConfigError(
            f"{KEY}.enabled=true with {KEY}.backend=inductor needs a C compiler (cc, gcc or "
            f"clang) on PATH, and none is there; install one, or use {KEY}.backend=aot_eager"
        )
    found = {"backend": backend}
    for name in ("mode", "fullgraph", "dynamic"):
        if getattr(settings, name) is not None:
            found[name] = getattr(settings, name)
    return found


def compile_in_place(module: nn.Module, settings: dict[str, Any]) -> int:
    """Compile `module`'s repeated blocks (or the whole module) in place; how many modules."""
    unit = hooks.shard_unit_of(module)
    blocks = [m for m in module.modules() if isinstance(unit, type) and isinstance(m, unit)]
    for target in blocks or [module]:
        target.compile(**settings)
    what = f"{len(blocks)} {unit.__name__} blocks" if blocks else type(module).__name__
    console.info("compile: %s with torch.compile(%s)", what,
                 ", ".join(f"{k}={v!r}" for k, v in settings.items()))  # fmt: skip
    return len(blocks) or 1
