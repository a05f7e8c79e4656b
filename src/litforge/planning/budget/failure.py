"""A measurement that fails, as one line: the callback skips with it, the command exits
with it. Whatever the user's step or torch raises, a training run goes on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from litforge.errors import LitforgeError


class MeasurementFailed(LitforgeError):
    """The memory budget could not measure the module (its step or torch raised)."""


def describe(err: BaseException) -> str:
    """`Type: first line of the message`; litforge's own errors by their message alone."""
    lines = str(err).strip().splitlines()
    first = lines[0] if lines else ""
    if isinstance(err, LitforgeError):
        return first
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


@contextmanager
def one_line(what: str) -> Iterator[None]:
    """Any exception inside becomes a `MeasurementFailed` naming `what` was measured."""
    try:
        yield
    except LitforgeError:
        raise
    except Exception as err:  # noqa: BLE001 - the user's code or torch, whatever it raises
        raise MeasurementFailed(
            f"the memory budget could not measure {what} ({describe(err)})"
        ) from err
