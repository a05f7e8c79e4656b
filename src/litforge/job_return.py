"""A job's outcome, written by the job's own process for the launcher that started it.

`hydra/launcher=gpus` runs each job as a process of its own; the process reports how its
job ended through the JSON file named by $LITFORGE_JOB_RETURN: the value the task function
returned, or the error it ended with. Two writers, one per way a job ends:
- `WriteJobReturn`, a Hydra callback: any Hydra app's return value, or an exception that
  reached Hydra;
- `record_error`, from litforge's `report_user_errors`: a litforge error, which ends the
  process with its one line and exit status before Hydra sees it.
A process that dies without writing (kill -9, the kernel's OOM killer) leaves no file;
its exit status says what happened. Standard library and Hydra only: every Hydra app of
the environment may load this.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

ENV = "LITFORGE_JOB_RETURN"


def _write(record: dict[str, Any]) -> None:
    path = os.environ.get(ENV)
    if not path or int(os.environ.get("LOCAL_RANK", "0")) != 0:
        return
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(record))
    partial.replace(target)  # the launcher never reads half a record


def _plain(value: Any) -> Any:
    """The return value as JSON can hold it (a DictConfig/ListConfig as containers)."""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # read back by float(); JSON has no nan/inf
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def error_record(err: BaseException) -> dict[str, Any]:
    from litforge.errors import ConfigError, LitforgeError

    return {
        "status": "failed",
        "type": f"{type(err).__module__}.{type(err).__qualname__}",
        "message": str(err),
        "litforge": isinstance(err, LitforgeError),
        "config_error": isinstance(err, ConfigError),
        "interrupts": bool(getattr(err, "interrupts", False)),
        "exit_code": getattr(err, "exit_code", None),
        "signum": getattr(err, "signum", None),
    }


def record_error(err: BaseException) -> None:
    """The job ends with `err` (litforge's errors, before the process exits)."""
    if os.environ.get(ENV):
        _write(error_record(err))


class WriteJobReturn(Callback):
    """Hydra callback: on job end, the job's value or exception to $LITFORGE_JOB_RETURN."""

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if job_return.status == JobStatus.COMPLETED:
            _write({"status": "completed", "value": _plain(job_return.return_value)})
        else:
            _write(error_record(job_return._return_value))
