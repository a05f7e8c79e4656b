"""The launcher's devices as capacity: which trial may start where.

Each device has a capacity and each trial a cost on every device it takes: one slot of one
(per_device=1), or bytes of memory (per_device=auto, from the memory budget).
"""

from __future__ import annotations

from collections.abc import Callable


class Capacity:
    """Free capacity per device id; a trial takes `count` distinct devices at `cost` each."""

    def __init__(self, capacity: dict[int, float]) -> None:
        self.total = dict(capacity)
        self.free = dict(capacity)

    def choose(
        self, count: int, cost: float, usable: Callable[[int], bool] | None = None
    ) -> list[int] | None:
        """The `count` devices with the most room for `cost` (among those `usable` allows),
        without taking them; None if too few have it."""
        fits = sorted(
            (i for i in self.free if self.free[i] >= cost), key=lambda i: (-self.free[i], i)
        )
        chosen: list[int] = []
        for i in fits:
            if len(chosen) == count:
                break  # `usable` is asked no further: it may take a lease
            if usable is None or usable(i):
                chosen.append(i)
        if len(chosen) < count:
            return None
        return sorted(chosen)

    def take(
        self, count: int, cost: float, usable: Callable[[int], bool] | None = None
    ) -> list[int] | None:
        """The `count` devices with the most room for `cost`, taken; None if too few have it."""
        chosen = self.choose(count, cost, usable)
        if chosen is None:
            return None
        for i in chosen:
            self.free[i] -= cost
        return chosen

    def give_back(self, ids: list[int], cost: float) -> None:
        for i in ids:
            self.free[i] = min(self.total[i], self.free[i] + cost)
