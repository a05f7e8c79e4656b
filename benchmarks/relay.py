"""Sides of an A/B comparison taking turns inside one process, a few steps at a time.

Whole-run timings on a shared machine drift by tens of percent between runs, so a ratio of
two runs measured seconds apart says little. Here every side trains at once in the same
process, but only one holds the turn: it runs `steps_per_turn` optimizer steps, passes
the turn on, and waits for it to come back. The sides' turns alternate every fraction of a
second (A B C A B C ...), so each round's sides see the same machine state, and a round's
ratio is a paired measurement: a side's turn over the geometric mean of the other side's
two turns around it. The figure is the median over rounds.

A turn is the process's CPU time from receiving the turn to passing it on: the side's
steps and all the work between them (data loading, hooks, logging, validation and
checkpoints when they fall in the turn). The first round (building objects, first-call
costs) is not counted. One side may run on the main thread (the template installs signal
handlers, which Python allows only there); the others run on threads of their own.
"""

from __future__ import annotations

import gc
import math
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import lightning as L

# The relay the `TurnCallback` of a config reports to while `Relay.run` is running.
ACTIVE: Relay | None = None


class Relay:
    """Round-robin turns of `steps_per_turn` steps over named sides, `rounds` times each."""

    def __init__(self, names: list[str], steps_per_turn: int, rounds: int) -> None:
        self.names = names
        self.steps_per_turn = steps_per_turn
        self.rounds = rounds
        self.turn_s: dict[str, list[float]] = {name: [] for name in names}
        self._steps = dict.fromkeys(names, 0)
        self._go = {name: threading.Event() for name in names}
        self._started = 0.0
        self._failure: BaseException | None = None

    @property
    def total_steps(self) -> int:
        """Steps each side must train: its measured turns plus one more to finish in."""
        return self.steps_per_turn * (self.rounds + 1)

    def step(self, name: str) -> None:
        """Side `name` finished an optimizer step; at a turn's end, hand the turn on."""
        self._steps[name] += 1
        if self._steps[name] % self.steps_per_turn:
            return
        self.turn_s[name].append(time.process_time() - self._started)
        if len(self.turn_s[name]) <= self.rounds:  # else: finish the run holding the turn
            self._hand_on(name)
            self._wait(name)

    def run(self, main: str, sides: dict[str, Callable[[Relay], Any]]) -> dict[str, list[float]]:
        """Train every side (`main` on this thread); returns name -> measured turn seconds."""
        global ACTIVE
        if main != self.names[0]:
            raise ValueError(f"the main thread's side {main!r} must come first in {self.names}")
        ACTIVE = self
        threads = [
            threading.Thread(target=self._side, args=(name, sides[name]), daemon=True)
            for name in self.names
            if name != main
        ]
        for thread in threads:
            thread.start()
        try:
            self._begin_turn()
            self._side(main, sides[main])
            for thread in threads:
                thread.join()
        finally:
            ACTIVE = None
        if self._failure is not None:
            raise self._failure
        # Round 0 holds each side's start-up; the last recorded turn is followed by the
        # run's end, outside any turn.
        return {name: turns[1 : self.rounds + 1] for name, turns in self.turn_s.items()}

    def _side(self, name: str, train: Callable[[Relay], Any]) -> None:
        if name != self.names[0]:
            self._wait(name)
        try:
            train(self)
        except BaseException as err:  # noqa: BLE001 - reported by run() on the main thread
            self._failure = self._failure or err
        if self._steps[name] < self.total_steps and self._failure is None:
            self._failure = RuntimeError(f"side {name!r} stopped after {self._steps[name]} steps")
        self._finished(name)

    def _finished(self, name: str) -> None:
        self._steps[name] = -(10**9)  # marks it done: it never takes a turn again
        self._hand_on(name)

    def _hand_on(self, name: str) -> None:
        i = self.names.index(name)
        for offset in range(1, len(self.names) + 1):
            nxt = self.names[(i + offset) % len(self.names)]
            if self._steps[nxt] >= 0 and nxt != name:
                self._go[nxt].set()
                return

    def _wait(self, name: str) -> None:
        self._go[name].wait()
        self._go[name].clear()
        if self._failure is not None:
            raise RuntimeError("another side failed")
        self._begin_turn()

    def _begin_turn(self) -> None:
        gc.collect()  # garbage of the previous turn is not this turn's cost
        self._started = time.process_time()


class TurnCallback(L.Callback):
    """Reports each optimizer step of a Lightning side to the running relay.

    Attached from config like any callback: `+callbacks.relay._target_=
    benchmarks.relay.TurnCallback +callbacks.relay.side=template`.
    """

    def __init__(self, side: str) -> None:
        self.side = side

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if ACTIVE is not None:
            ACTIVE.step(self.side)


def paired_ratios(
    turns: dict[str, list[float]], num: str, den: str, order: list[str]
) -> list[float]:
    """Per-round ratios of num's turn over the geometric mean of the two `den` turns that
    bracket it in time (the one before and the one after), so a machine slowing down or
    speeding up steadily over the round cancels; `order` is the relay's turn order."""
    a, b = turns[num], turns[den]
    after = order.index(den) > order.index(num)  # den's turn r comes after num's turn r
    pairs = range(1, len(a)) if after else range(len(a) - 1)
    return [
        a[r] / math.sqrt(b[r - 1] * b[r]) if after else a[r] / math.sqrt(b[r] * b[r + 1])
        for r in pairs
    ]


def halves(values: list[float]) -> list[float]:
    """Medians of the even and odd rounds: how far the figure moves on half the data."""
    return [round(statistics.median(values[0::2]), 4), round(statistics.median(values[1::2]), 4)]
