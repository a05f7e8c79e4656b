"""Next-token windows over one long sequence of token ids (a tokenized text)."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class TokenWindows(Dataset):
    """Non-overlapping windows: item i is (ids[i*T : i*T+T], ids[i*T+1 : i*T+T+1])."""

    def __init__(self, ids: torch.Tensor, block_size: int) -> None:
        self.ids = ids.long()
        self.block_size = block_size

    def __len__(self) -> int:
        return (len(self.ids) - 1) // self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.block_size
        chunk = self.ids[start : start + self.block_size + 1]
        return chunk[:-1], chunk[1:]
