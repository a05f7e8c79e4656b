"""`model.freeze: [patterns]`: parameters whose names match stay as they are.

Patterns are fnmatch patterns over `named_parameters()` names (`net.blocks.0.*`,
`*.wte.weight`). Frozen parameters get no gradients, so no optimizer state either. A
pattern that matches nothing is one line listing the names there are; so are patterns
that leave nothing to train.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from torch import nn

from litforge import console
from litforge.errors import ConfigError

KEY = "freeze"  # under model: litforge's, never passed to the LightningModule


def freeze(module: nn.Module, patterns: Sequence[str] | None) -> int:
    """Set requires_grad=False on the matching parameters; how many tensors were frozen."""
    if not patterns:
        return 0
    names = [name for name, _ in module.named_parameters()]
    for pattern in patterns:
        if not fnmatch.filter(names, str(pattern)):
            raise ConfigError(
                f"model.freeze: {pattern!r} matches no parameter; names start with: "
                f"{_prefixes(names)}"
            )
    frozen = 0
    for name, param in module.named_parameters():
        if any(fnmatch.fnmatchcase(name, str(p)) for p in patterns):
            param.requires_grad_(False)
            frozen += param.numel()
    total = sum(p.numel() for p in module.parameters())
    if not any(p.requires_grad for p in module.parameters()):
        raise ConfigError(
            f"model.freeze={[str(p) for p in patterns]} freezes all {total:,} parameters, so "
            f"nothing is left to train; leave some out (names start with: {_prefixes(names)})"
        )
    console.info("model.freeze: %d of %d parameters frozen (%s)", frozen, total,
                 ", ".join(map(str, patterns)))  # fmt: skip
    return frozen


def _prefixes(names: list[str]) -> str:
    prefixes = sorted({".".join(n.split(".")[:3]) for n in names})
    return f"{', '.join(prefixes[:12])}{', ...' if len(prefixes) > 12 else ''}"
