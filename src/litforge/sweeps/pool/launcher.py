"""The entry points of `hydra/launcher=gpus`: a batch of jobs (`launch`), or jobs asked one
by one from a feed (`launch_each`), run by a `runner.DevicePool` on the devices the
settings name: each job started when its devices are free, the sweep's signals passed on,
every outcome collected.

Settings (hydra.launcher.*): `settings.py` declares and checks them
(conf/hydra/launcher/gpus.yaml is generated from it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from omegaconf import DictConfig

from litforge.errors import ConfigError
from litforge.sweeps.pool import devices as pool_devices
from litforge.sweeps.pool import packing, settings
from litforge.sweeps.pool.capacity import Capacity
from litforge.sweeps.pool.feed import Feed
from litforge.sweeps.pool.leases import Leases
from litforge.sweeps.pool.runner import DevicePool
from litforge.sweeps.pool.trial_process import Job, ranks_of

log = logging.getLogger("litforge")
check_settings = settings.check


def launch(
    config: dict[str, Any],
    loader: Any,
    master: DictConfig,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    entry: list[str] | None = None,
) -> list[JobReturn]:
    """Run every job (all checked before the first starts); their returns in job order."""
    pool = _pool(config, loader, master, entry)
    jobs = [
        Job.compose(initial_job_idx + i, list(o), loader, master)
        for i, o in enumerate(job_overrides)
    ]
    for job in jobs:
        pool.check_ranks(job)
    pool.capacity = Capacity(pool.planner.capacity([j.config for j in jobs]))
    for job in jobs:
        pool.costs[job.idx] = pool.planner.cost(job.config)
    pool.pending = list(jobs)
    pool.run()
    return [pool.returns[job.idx] for job in jobs]


def launch_each(
    config: dict[str, Any],
    loader: Any,
    master: DictConfig,
    feed: Feed,
    at_once: int,
    entry: list[str] | None = None,
) -> None:
    """Trial by trial: ask `feed` for the next job whenever devices for one are free (and
    fewer than `at_once` run), start it, tell `feed` each outcome as it comes; until the
    feed has no more and every job has ended."""
    pool = _pool(config, loader, master, entry)
    pool.feed, pool.at_once = feed, at_once
    try:
        pool.ranks_hint = min(ranks_of(master, 0), len(pool.ids))
    except ConfigError:  # the trials' own configs say (trainer.devices may be searched)
        pool.ranks_hint = 1
    pool.run()


def _pool(
    config: dict[str, Any], loader: Any, master: DictConfig, entry: list[str] | None
) -> DevicePool:
    """A pool on the devices the settings name (checked), with their leases."""
    given = settings.check(config)
    visible = pool_devices.visible_gpus()
    ids = pool_devices.resolve(given.devices, visible)
    sweep_dir = Path(str(master.hydra.sweep.dir)).absolute()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    cards = pool_devices.probe(visible)
    # On CPU (one trial process or rank per listed device at once) the trials split the
    # cores instead of each taking all of them.
    threads = None if visible else max(1, _cores() // len(ids))
    pool = DevicePool(ids, cards, threads, sweep_dir)
    pool.planner = packing.Planner(given.per_device, float(given.margin), ids, cards)
    pool.loader, pool.master = loader, master
    pool.stagger_s = float(given.stagger_s)
    pool.kill_after_s = float(given.kill_after_s)
    pool.entry = entry
    if given.share_devices:
        log.info("hydra.launcher.share_devices=true: this sweep's trials may share a device "
                 "with another sweep's on this machine")  # fmt: skip
    else:
        pool.leases = Leases(Path(str(given.lease_dir)))
    return pool


def _cores() -> int:
    """launch.processes.available_cores, not imported from there: that module loads
    lightning, seconds the sweep process (which trains nothing) need not spend."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
