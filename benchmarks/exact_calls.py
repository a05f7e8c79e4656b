"""Function calls counted per label: the deterministic "which part costs what" of
`benchmarks.exact`.

`sys.setprofile` sees every Python function call and every C function called from Python
(a tensor op is one call, whatever its size). Each is charged to the innermost labelled
call running, as `benchmarks.hook_costs` charges time; the labelling itself makes no call
that is counted, so a label's count is the same with and without the labels around it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

REST = "Lightning, model and data"
MAX_DEPTH = 64


class CallCount:
    """Calls (Python and C) per label while started; labels nest, the innermost is charged."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self._labels: list[str] = [REST] * MAX_DEPTH
        self._depth = 0

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            if frame.f_code is _WRAPPER_CODE:  # the labelling wrapper: not the work
                return
        elif event != "c_call":
            return
        label = self._labels[self._depth]
        self.calls[label] = self.calls.get(label, 0) + 1

    def start(self) -> None:
        sys.setprofile(self._profile)

    def stop(self) -> None:
        sys.setprofile(None)

    def label(self, call: Callable[..., Any], label: str) -> Callable[..., Any]:
        """`call`, charging the calls made inside it to `label`."""
        return _wrapper(self, call, label)


def _wrapper(counter: CallCount, call: Callable[..., Any], label: str) -> Callable[..., Any]:
    labels = counter._labels

    def labelled(*args: Any, **kwargs: Any) -> Any:
        # Attribute and item assignments only: no call for the profiler to count.
        counter._depth += 1
        labels[counter._depth] = label
        try:
            return call(*args, **kwargs)
        finally:
            counter._depth -= 1

    return labelled


_WRAPPER_CODE = _wrapper(CallCount(), print, "").__code__
