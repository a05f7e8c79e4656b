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

from litforge.exits import PRE_JOB_MARK

_SWITCH = "HYDRA_FULL_ERROR"


@contextmanager
def errors_before_the_job(argv: list[str]) -> Iterator[None]:
    """Around Hydra's main: an error raised before `job_started()` becomes one line."""
    job_started()  # a switch a parent process set while it started is not this one's
    multirun = bool({"-m", "--multirun"} & set(argv))
    if multirun or os.environ.get(_SWITCH) is not None:
        yield
        return
    os.environ[_SWITCH] = "1"
    os.environ[PRE_JOB_MARK] = "1"  # ours: litforge's own reporting still says one line
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
    if os.environ.pop(PRE_JOB_MARK, None) is not None:
        os.environ.pop(_SWITCH, None)


def one_line(err: OmegaConfBaseException) -> str:
    """`hydra.run.dir: Interpolation key 'paths.bogus' not found (...)`."""
    key = getattr(err, "full_key", None) or "the config"
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    hint = "it is set in an experiment, a config file or on the command line"
    if "paths." in message:
        hint += "; the `paths` group has root_dir, data_dir, log_dir, output_dir and work_dir"
    return f"{key}: {message} ({hint})"
