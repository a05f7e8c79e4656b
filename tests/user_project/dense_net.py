"""A dense net as lightning-hydra-template's `SimpleDenseNet` is laid out: Linear ->
BatchNorm1d -> ReLU stacks on a flattened image, then a Linear to the classes."""

from __future__ import annotations

import torch
from torch import nn


class SimpleDenseNet(nn.Module):
    def __init__(
        self,
        input_size: int = 784,
        lin1_size: int = 256,
        lin2_size: int = 256,
        lin3_size: int = 256,
        output_size: int = 10,
    ) -> None:
        super().__init__()
        sizes = [input_size, lin1_size, lin2_size, lin3_size]
        layers: list[nn.Module] = []
        for width_in, width_out in zip(sizes, sizes[1:], strict=False):
            layers += [nn.Linear(width_in, width_out), nn.BatchNorm1d(width_out), nn.ReLU()]
        self.model = nn.Sequential(*layers, nn.Linear(lin3_size, output_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x.view(x.size(0), -1))
