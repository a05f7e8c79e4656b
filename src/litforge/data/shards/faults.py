"""The reader's errors: a damaged file (one line naming it, not retried) and an
unreachable store (retried, then one line; the same command resumes).

Both may be raised in a DataLoader worker process. PyTorch re-raises a worker's exception
in the main process as `type(message + the worker's traceback)`, which the entry point
would print as some thirty lines; these types keep only the original line.
"""

from __future__ import annotations

from litforge.errors import ConfigError, LitforgeError


class _OneLineFromWorkers:
    def __init__(self, message: str = "") -> None:
        # torch.utils.data's ExceptionWrapper.reraise: "Caught X in DataLoader worker
        # process N.\nOriginal Traceback ...", ending "module.X: the original message".
        if message.startswith("Caught ") and "\nOriginal Traceback" in message:
            last = message.rstrip().splitlines()[-1]
            message = last.split(": ", 1)[1] if ": " in last else last
        super().__init__(message)


class DamagedShards(_OneLineFromWorkers, ConfigError):
    """A shard or index that is not what its dataset says it is: truncated, garbled,
    missing, or counting other samples. Retrying would read the same bytes."""


class DataStoreUnreachable(_OneLineFromWorkers, LitforgeError):
    """Reading the data store failed after every retry."""

    exit_code = 75
