"""A small convolutional classifier for 8x8 grey-scale digits."""

from __future__ import annotations

import torch
from torch import nn


class CNN(nn.Module):
    """Two 3x3 convolutions, one 2x2 max-pool, a hidden linear layer.

    No batch-norm on purpose: gradient accumulation is then exactly equivalent to a
    larger batch, and the net behaves the same in train and eval mode except dropout.
    """

    def __init__(
        self,
        in_channels: int = 1,
        image_size: int = 8,
        channels: list[int] | tuple[int, int] = (32, 64),
        hidden: int = 128,
        num_classes: int = 10,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if len(channels) != 2:
            raise ValueError(f"channels={list(channels)} must be two sizes, e.g. [32, 64]")
        if min(channels) < 1:
            raise ValueError(f"channels={list(channels)} must be sizes >= 1")
        for name, value in {
            "in_channels": in_channels,
            "image_size": image_size,
            "hidden": hidden,
        }.items():
            if value < 1:
                raise ValueError(f"{name}={value} must be >= 1")
        if num_classes < 2:
            raise ValueError(f"num_classes={num_classes} must be >= 2")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout={dropout} must be >= 0 and < 1")
        self.num_classes = num_classes
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(c1, c2, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # (B, c2, image_size/2, image_size/2)
        )
        flat = c2 * (image_size // 2) ** 2
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(flat, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) images -> (B, num_classes) logits."""
        return self.head(self.features(images))
