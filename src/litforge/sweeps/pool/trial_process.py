"""One job of the sweep as a process of its own: its command line, its start, its outcome.

The process runs the project's entry script (train.py) as a single run in the job's
directory, so Lightning can start the trial's own DDP ranks by re-running it. It reports
its outcome through `litforge.job_return`; a process that dies without a word is judged
by its exit status.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf, open_dict

from litforge import job_return
from litforge.errors import ConfigError, LitforgeError
from litforge.sweeps.pool.entry import entry_command

# The sweep's own overrides, which the trial's single run must not repeat.
_SWEEP_ONLY = (
    "hydra.mode", "hydra/launcher", "hydra.launcher", "hydra.run.dir", "hydra.sweep.dir",
    "hydra.job.num", "hydra.job.id", "hydra.callbacks.litforge_job_return",
)  # fmt: skip
# launch.processes.LAUNCHER_PID, not imported from there: that module loads lightning.
LAUNCHER_PID = "LITFORGE_LAUNCHER_PID"
_PARSER = OverridesParser.create()
_RANK_ENV = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")
SWEEP_PID = "LITFORGE_SWEEP_PID"  # the sweep process, in each trial's environment
GUARD = Path(__file__).with_name("guard.py")  # run as a script: it imports nothing of ours


class TrialProcessDied(LitforgeError):
    """The trial's process ended without reporting an outcome (killed, crashed)."""

    interrupts = False  # counted as the trial's failure


class TrialStoppedEarly(LitforgeError):
    """The sweep passed a signal on to a trial that ended before it could say how (still
    starting up, or killed kill_after_s later): interrupted, not failed; the sweep's rerun
    runs it. Its exit status is the signal's (128 + its number), as the sweep's own."""

    def __init__(self, signum: int, message: str) -> None:
        self.exit_code = 128 + signum
        super().__init__(message)


@dataclass
class PoolJobReturn(JobReturn):
    """Hydra's JobReturn plus the devices the trial ran on (trials.csv records them)."""

    devices: list[int] = field(default_factory=list)
    device_uuids: list[str] = field(default_factory=list)
    duration_s: float | None = None  # the trial's own time, start to end of its process

    @property
    def return_value(self) -> Any:
        """The value, or the trial's error raised, without Hydra's "Error executing job"
        line: the launcher has said which trial ended how."""
        if self.status == JobStatus.COMPLETED:
            return self._return_value
        raise self._return_value

    @return_value.setter
    def return_value(self, value: Any) -> None:
        self._return_value = value


@dataclass
class Job:
    """One job: its number, its composed config, where it runs, what it needs."""

    idx: int
    overrides: list[str]
    config: DictConfig
    job_dir: Path
    ranks: int

    @classmethod
    def compose(cls, idx: int, overrides: list[str], loader: Any, master: DictConfig) -> Job:
        config = loader.load_sweep_config(master, list(overrides))
        with open_dict(config):
            config.hydra.job.id = idx
            config.hydra.job.num = idx
        job_dir = Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
        with open_dict(config):
            config.hydra.runtime.output_dir = str(job_dir.absolute())
        return cls(idx, list(overrides), config, job_dir.absolute(), ranks_of(config, idx))

    def command(self, sweep_dir: Path, entry: list[str] | None = None) -> list[str]:
        """The trial's command line: the app's program (`entry.entry_command`; this
        process's own by default), a single run in the job directory."""
        hydra = self.config.hydra
        carried = [o for o in hydra.overrides.hydra if not _key(o).startswith(_SWEEP_ONLY)]
        named = "run_name" in self.config
        task = [o for o in hydra.overrides.task if not (named and _key(o) == "run_name")]
        argv = [*(entry or entry_command(None)), *task, *carried, "hydra.mode=RUN"]
        argv += [
            f"hydra.run.dir={_quoted(str(self.job_dir))}",
            f"hydra.sweep.dir={_quoted(str(sweep_dir.absolute()))}",
            f"hydra.job.num={self.idx}",
            f"hydra.job.id={self.idx}",
            f"++hydra.callbacks.litforge_job_return._target_={job_return.__name__}.WriteJobReturn",
        ]
        if named:
            # The in-process job's checkpoint key (multirun.job_name): each trial its own,
            # also when the sweep was given one run_name.
            base = self.config.get("run_name") or sweep_dir.name
            argv.append(f"run_name={_quoted(f'{base}-{self.job_dir.name}')}")
        return argv


def ranks_of(config: DictConfig, idx: int) -> int:
    """Devices one trial takes: its `trainer.devices` count (1 for auto, or without one)."""
    devices = OmegaConf.select(config, "trainer.devices", default=1)
    if devices in (None, "auto", -1, "-1"):
        return 1
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ConfigError(
            f"trainer.devices={devices} in job #{idx}: under hydra/launcher=gpus give a count "
            "(trainer.devices=2); the launcher picks which devices each trial gets"
        )
    return devices


def start(job: Job, sweep_dir: Path, env: dict[str, str], return_file: Path, lifeline: int,
          kill_after_s: float, entry: list[str] | None = None) -> subprocess.Popen:  # fmt: skip
    """The trial's process, under its guard (`guard.py`: a process group of its own that
    dies with the sweep, or kill_after_s after a signal); its output in the job
    directory's launcher.log. `lifeline`: the read end of the sweep's lifeline pipe."""
    job.job_dir.mkdir(parents=True, exist_ok=True)
    return_file.unlink(missing_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in (*_RANK_ENV, LAUNCHER_PID)}
    environ.update(env)
    environ[job_return.ENV] = str(return_file)
    environ[SWEEP_PID] = str(os.getpid())  # the trial's parent is its guard
    guarded = [sys.executable, str(GUARD), str(lifeline), repr(float(kill_after_s)), "--"]
    with open(job.job_dir / "launcher.log", "ab") as out:
        return subprocess.Popen(
            [*guarded, *job.command(sweep_dir, entry)],
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            pass_fds=(lifeline,),
            start_new_session=True,  # the guard leads a group: the trial and all it starts
        )


def outcome(job: Job, exit_code: int, return_file: Path, devices: list[int],
            uuids: list[str], signalled: int | None = None,
            kill_after_s: float | None = None) -> PoolJobReturn:  # fmt: skip
    """The job's JobReturn, from the file its process wrote, or else from its exit status
    (`signalled`: the signal the sweep passed on to it, if any; `kill_after_s`: the grace
    its guard gave it before SIGKILL)."""
    task_cfg = OmegaConf.masked_copy(job.config, [k for k in job.config if k != "hydra"])
    ret = PoolJobReturn(
        overrides=job.overrides, cfg=task_cfg, hydra_cfg=job.config,
        working_dir=str(job.job_dir), task_name=str(job.config.hydra.job.name),
        devices=devices, device_uuids=uuids,
    )  # fmt: skip
    record = _read(return_file)
    if record is not None and record.get("status") == "completed":
        ret.status, ret.return_value = JobStatus.COMPLETED, _number(record.get("value"))
        return ret
    ret.status = JobStatus.FAILED
    if record is not None:
        ret._return_value = _error(record)
    elif signalled is not None and exit_code == -signal.SIGKILL and kill_after_s is not None:
        ret._return_value = TrialStoppedEarly(
            signalled,
            f"{signal.Signals(signalled).name} from the sweep: the trial was still running "
            f"hydra.launcher.kill_after_s={kill_after_s:g} s later, so it was killed (its "
            f"output: {job.job_dir / 'launcher.log'})",
        )
    elif signalled is not None:
        ret._return_value = TrialStoppedEarly(
            signalled,
            f"{signal.Signals(signalled).name} from the sweep ended the trial's process "
            f"({_exit_words(exit_code)}) before it reported an outcome",
        )
    else:
        ret._return_value = TrialProcessDied(
            f"the trial's process ended with {_exit_words(exit_code)} and no outcome "
            f"(its output: {job.job_dir / 'launcher.log'})"
        )
    return ret


def refused(job: Job, err: ConfigError) -> PoolJobReturn:
    """The return of a job refused before it started (its config): the sweep stops on it."""
    ret = PoolJobReturn(overrides=job.overrides, hydra_cfg=job.config, status=JobStatus.FAILED)
    ret._return_value = err
    return ret


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _number(value: Any) -> Any:
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, list):
        return [_number(v) for v in value]
    return value


def _error(record: dict[str, Any]) -> BaseException:
    """The trial's error, rebuilt as the sweep's outcome rules read it (its class's name,
    its message; a litforge error's exit status and whether it only interrupted)."""
    from litforge.sweeps import signals

    message, name = str(record.get("message", "")), str(record.get("type", "Error"))
    module, _, short = name.rpartition(".")
    where = {"__module__": module or __name__}
    if name == f"{signals.__name__}.NotStarted" and record.get("signum"):
        return signals.NotStarted(int(record["signum"]))
    if record.get("config_error"):
        return type(short, (ConfigError,), where)(message)
    if record.get("litforge"):
        attrs = {**where, "interrupts": bool(record.get("interrupts"))}
        if record.get("exit_code") is not None:
            attrs["exit_code"] = int(record["exit_code"])
        return type(short, (LitforgeError,), attrs)(message)
    return type(short, (Exception,), where)(message)


def _exit_words(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _key(override: str) -> str:
    """The key or group an override sets, as Hydra's grammar reads it (`+a@b=c`, `~a`)."""
    return _PARSER.parse_override(override).key_or_group


def _quoted(value: str) -> str:
    """An override value as Hydra's grammar reads it back unchanged."""
    if re.fullmatch(r"[\w./:@+-]+", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
