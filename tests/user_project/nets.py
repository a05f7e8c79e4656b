"""A user's net: keys of every type a config holds (int, list, str, float, bool)."""

from __future__ import annotations

import torch
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


class MLP(nn.Module):
    def __init__(
        self,
        in_features: int,
        hidden_sizes: list[int],
        num_classes: int,
        activation: str = "relu",
        norm_eps: float = 1e-5,
        use_norm: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} must be one of {', '.join(ACTIVATIONS)}")
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for size in hidden_sizes:
            layers.append(nn.Linear(width, size))
            if use_norm:
                layers.append(nn.LayerNorm(size, eps=norm_eps))
            layers.append(ACTIVATIONS[activation]())
            width = size
        layers.append(nn.Linear(width, num_classes))
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)
