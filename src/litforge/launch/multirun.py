"""A job of a Hydra multirun (`python train.py -m ...`) that starts several processes (DDP).

Lightning's launcher starts the other ranks by re-running `sys.argv` with
`hydra.run.dir=<HydraConfig run.dir>` appended. In a sweep that argv still holds `-m` and
the whole sweep, so every child rank would run every job, into a `multirun/` of its own.
`job_scope()` makes the re-run command this one job instead, in this job's directory, and
leaves the process as it found it for the next job.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, read_write

from litforge.launch.processes import LAUNCHER_PID, end_process_group

# What Lightning's launcher sets in the process that launches the ranks (and our launcher pid).
RANK_ENV = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", LAUNCHER_PID)

# Hydra overrides that are the sweep's business, or that Lightning's launcher appends itself.
_SWEEP_ONLY = (
    "hydra.mode",
    "hydra.sweep",
    "hydra.sweeper",
    "hydra.launcher",
    "hydra/sweeper",
    "hydra/launcher",
    "hydra.run.dir",
    "hydra.job.name",
    "hydra.output_subdir",
)


def in_multirun() -> bool:
    """Whether this process runs a job of a Hydra multirun."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def job_name(cfg: DictConfig) -> str:
    """`<run_name>-<job>`, or `<sweep directory name>-<job>` without a run_name.

    <job> is the job's directory name, hydra.sweep.subdir: the job number by default, a
    trial number where a sweeper keeps it stable across retries. It names the job's
    checkpoint location (checkpointing.configure.run_key).
    """
    run_dir = Path(cfg.run_dir).resolve()
    return f"{cfg.get('run_name') or run_dir.parent.name}-{run_dir.name}"


@contextlib.contextmanager
def job_scope(cfg: DictConfig) -> Iterator[None]:
    """Around one job of a multirun: ranks that Lightning starts run this job only, in its
    directory, under its checkpoint key; afterwards sys.argv, the rank environment and the
    process group are back to how the next job needs them.
    Outside a multirun it does nothing."""
    if not in_multirun():
        yield
        return
    hydra_cfg = HydraConfig.get()
    argv = sys.argv
    env = {name: os.environ.get(name) for name in RANK_ENV}
    sys.argv = child_argv(argv[0], cfg)
    # HydraConfig is this job's own copy (Hydra sets a new one per job): no need to undo.
    with read_write(hydra_cfg.run):
        hydra_cfg.run.dir = hydra_cfg.runtime.output_dir
    try:
        yield
    finally:
        # (The job's tracked runs have ended by now: tracking.lifecycle.runs_end_with_job.)
        # Always, after a failure too: the next job would otherwise reuse this group, whose
        # other rank belongs to this job. Destroying a gloo group does not wait for peers.
        end_process_group()
        sys.argv = argv
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def child_argv(script: str, cfg: DictConfig) -> list[str]:
    """The command line of this job alone: its own overrides, the user's `hydra.*` ones that
    still apply to a single run (e.g. hydra.job.chdir), RUN mode (a config may set
    hydra.mode: MULTIRUN), and run_name=<job_name>, so a child rank (a single run) finds the
    checkpoint location its launcher uses."""
    overrides = HydraConfig.get().overrides
    parser = OverridesParser.create()
    task = [o for o in overrides.task if _key(parser, o) != "run_name"]
    carried = [o for o in overrides.hydra if not _key(parser, o).startswith(_SWEEP_ONLY)]
    argv = [script, *task, *carried, "hydra.mode=RUN"]
    if "run_name" in cfg:
        key = job_name(cfg).replace("\\", "\\\\").replace("'", "\\'")
        argv.append(f"run_name='{key}'")
    return argv


def _key(parser: OverridesParser, override: str) -> str:
    return parser.parse_override(override).key_or_group
