"""The launcher's devices as capacity: which trial may start where.

Each device has a capacity and each trial a cost on every device it takes: one slot of one
(per_device=1), or bytes of memory (per_device=auto, from the memory budget).
"""

from __future__ import annotations


class Capacity:
    """Free capacity per device id; a trial takes `count` distinct devices at `cost` each."""

    def __init__(self, capacity: dict[int, float]) -> None:
        self.total = dict(capacity)
        self.free = dict(capacity)

    def take(self, count: int, cost: float) -> list[int] | None:
        """The `count` devices with the most room for `cost`, taken; None if too few have it."""
        fits = [i for i in self.free if self.free[i] >= cost]
        if len(fits) < count:
            return None
        chosen = sorted(fits, key=lambda i: (-self.free[i], i))[:count]
        for i in chosen:
            self.free[i] -= cost
        return sorted(chosen)

    def give_back(self, ids: list[int], cost: float) -> None:
        for i in ids:
            self.free[i] = min(self.total[i], self.free[i] + cost)
