"""What goes wrong while Hydra starts a single run, before the job: one line, not Hydra's
failed traceback.

Hydra formats an error by looking for its job's frame in the traceback. An error raised
before the job (an interpolation in `hydra.run.dir` that does not resolve, such as
`${paths.bogus}/x`) has none: Hydra prints "An error occurred during Hydra's exception
formatting: AssertionError()" and a ~100-line traceback. So until the job starts, Hydra is
told to let errors through (its own switch, `HYDRA_FULL_ERROR`), they are said here, and
the job's first step hands reporting back to Hydra. A user's own `HYDRA_FULL_ERROR` is left
alone; a multirun (whose sweeper and launcher report their own errors) is not touched.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from hydra.errors import CompactHydraException
from omegaconf.errors import OmegaConfBaseException

_SWITCH = "HYDRA_FULL_ERROR"
_armed = False


@contextmanager
def errors_before_the_job(argv: list[str]) -> Iterator[None]:
    """Around Hydra's main: an error raised before `job_started()` becomes one line."""
    global _armed
    multirun = bool({"-m", "--multirun"} & set(argv))
    if multirun or os.environ.get(_SWITCH) is not None:
        yield
        return
    os.environ[_SWITCH] = "1"
    _armed = True
    try:
        yield
    except CompactHydraException as err:  # Hydra's own short errors, printed as Hydra does
        job_started()
        cause = f"\n{err.__cause__}" if isinstance(err.__cause__, OmegaConfBaseException) else ""
        print(f"{err}{cause}", file=sys.stderr)
        sys.exit(1)
    except OmegaConfBaseException as err:
        job_started()
        print(f"error: {one_line(err)}", file=sys.stderr)
        sys.exit(2)  # a config error, as litforge's own ConfigError exits
    finally:
        job_started()


def job_started() -> None:
    """Hydra reports errors itself from here on (the job's first step)."""
    global _armed
    if _armed:
        os.environ.pop(_SWITCH, None)
        _armed = False


def one_line(err: OmegaConfBaseException) -> str:
    """`hydra.run.dir: Interpolation key 'paths.bogus' not found (...)`."""
    key = getattr(err, "full_key", None) or "the config"
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    hint = "it is set in an experiment, a config file or on the command line"
    if "paths." in message:
        hint += "; the `paths` group has root_dir, data_dir, log_dir, output_dir and work_dir"
    return f"{key}: {message} ({hint})"
