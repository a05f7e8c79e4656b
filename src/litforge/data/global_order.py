"""A sampler whose order is one permutation of the whole dataset per epoch, whatever the
number of processes, and whose position survives a change of that number.

Each epoch's order is torch.randperm(len(dataset)) seeded with `seed + epoch`, as
`torch.utils.data.DistributedSampler` draws it; rank r of N takes every N-th index from
position r. So the samples consumed after any number of steps are a prefix of that
permutation. The state (`state_dict`) is the epoch and the position in the permutation,
counted in samples over all processes: a run resumed with M processes, or another
micro-batch, continues with exactly the samples not yet consumed, rank r of M taking every
M-th from there.

Exactly once: an epoch never repeats a sample. Where the epoch's rest does not divide by
the number of processes, its last (rest mod N) samples are dropped, not padded with the
epoch's first ones as DistributedSampler pads (`drop_last=True`'s rule): every rank
yields as many, so no process waits at a collective for a batch the others lack. The
permutation changes every epoch, so the dropped samples do too (with `shuffle=False` they
are the same last ones each epoch). `skip_restored_epoch`: a resume onto changed data
(`StreamDataModule(accept_changed_data=True)`) ends the restored epoch at once, so
training continues at the next epoch's start.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler


class GlobalOrderSampler(Sampler[int]):
    def __init__(
        self, size: int, num_replicas: int = 1, rank: int = 0, seed: int = 0, shuffle: bool = True
    ) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must be in [0, {num_replicas})")
        self.size, self.num_replicas, self.rank = size, num_replicas, rank
        self.seed, self.shuffle = seed, shuffle
        self.epoch = 0
        self.start = 0  # position in this epoch's permutation the next iteration starts at
        self._yielded = 0  # by the current iteration
        self.skip_restored_epoch = False

    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this every epoch; a new epoch starts at its beginning, the epoch
        a run resumes in keeps its restored position."""
        if epoch != self.epoch:
            self.epoch, self.start, self._yielded = epoch, 0, 0

    def order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.size))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.size, generator=generator).tolist()

    def __iter__(self) -> Iterator[int]:
        order = self.order()
        self._yielded = 0
        for index in order[self.start + self.rank : self.end() : self.num_replicas]:
            self._yielded += 1
            yield index

    def end(self) -> int:
        """Where this iteration stops: the rest of the epoch cut to a multiple of the
        number of processes (every rank yields as many; nothing is repeated)."""
        left = max(0, self.size - self.start)
        return self.start + left - left % self.num_replicas

    def __len__(self) -> int:
        """Per process in a whole epoch (what Lightning counts an epoch's batches by)."""
        return self.size // self.num_replicas

    def remaining(self) -> int:
        """Per process from the current start to the end of the epoch."""
        return max(0, self.size - self.start) // self.num_replicas

    def position(self) -> int:
        """Samples of this epoch's permutation consumed over all processes."""
        return min(self.size, self.start + self._yielded * self.num_replicas)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position(), "size": self.size,
                "seed": self.seed}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        # Onto changed data the saved position means other samples: the epoch ends here.
        self.start = (
            self.size if self.skip_restored_epoch else min(int(state["position"]), self.size)
        )
        self._yielded = 0
