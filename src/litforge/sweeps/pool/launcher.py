"""The launch loop of `hydra/launcher=gpus`: start each job when its devices are free,
staggered; pass the sweep's signals on to the running trials; collect every outcome.

Settings (hydra.launcher.*, documented in conf/hydra/launcher/gpus.yaml): devices,
per_device, margin, stagger_s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig

from litforge.errors import ConfigError
from litforge.sweeps.pool import devices as pool_devices
from litforge.sweeps.pool import packing
from litforge.sweeps.pool.capacity import Capacity
from litforge.sweeps.pool.trial_process import Job, outcome, start

log = logging.getLogger("litforge")
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
POLL_S = 0.1
KILL_AFTER_S = 120.0  # a trial still running this long after the sweep is interrupted


def check_settings(settings: dict[str, Any]) -> None:
    packing.check(settings.get("per_device", 1), settings.get("margin", 0.1))
    stagger = settings.get("stagger_s", 0.0)
    if isinstance(stagger, bool) or not isinstance(stagger, int | float) or stagger < 0:
        raise ConfigError(
            f"hydra.launcher.stagger_s={stagger}: give the seconds between two trial starts, "
            "a number >= 0"
        )


def launch(
    settings: dict[str, Any],
    loader: Any,
    master: DictConfig,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
) -> list[JobReturn]:
    """Run every job (all checked before the first starts); their returns in job order."""
    check_settings(settings)
    visible = pool_devices.visible_gpus()
    ids = pool_devices.resolve(settings.get("devices", "auto"), visible)
    sweep_dir = Path(str(master.hydra.sweep.dir)).absolute()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    jobs = [
        Job.compose(initial_job_idx + i, list(o), loader, master)
        for i, o in enumerate(job_overrides)
    ]
    for job in jobs:
        if job.ranks > len(ids):
            raise ConfigError(
                f"trainer.devices={job.ranks} in job #{job.idx}, but hydra.launcher.devices "
                f"has {len(ids)} ({ids}); give trainer.devices={len(ids)} or fewer, or more devices"
            )
    cards = pool_devices.probe(visible)
    capacity, costs = packing.plan(
        settings.get("per_device", 1), float(settings.get("margin", 0.1)),
        [j.config for j in jobs], ids, cards,
    )  # fmt: skip
    # On CPU (one trial process or rank per listed device at once) the trials split the
    # cores instead of each taking all of them.
    threads = None if visible else max(1, _cores() // len(ids))
    return _Pool(jobs, costs, Capacity(capacity), cards, threads, sweep_dir,
                 float(settings.get("stagger_s", 0.0))).run()  # fmt: skip


def _cores() -> int:
    """launch.processes.available_cores, not imported from there: that module loads
    lightning, seconds the sweep process (which trains nothing) need not spend."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class _Pool:
    def __init__(self, jobs: list[Job], costs: list[float], capacity: Capacity,
                 cards: pool_devices.Cards, threads: int | None, sweep_dir: Path,
                 stagger_s: float) -> None:  # fmt: skip
        self.jobs, self.costs, self.capacity, self.cards = jobs, costs, capacity, cards
        self.threads, self.sweep_dir, self.stagger_s = threads, sweep_dir, stagger_s
        self.returns: dict[int, JobReturn] = {}
        self.running: dict[int, tuple[subprocess.Popen, list[int]]] = {}
        self.signalled: int | None = None
        self.outbox = sweep_dir / ".launcher"

    def run(self) -> list[JobReturn]:
        self.outbox.mkdir(exist_ok=True)
        queue = list(range(len(self.jobs)))
        last_start = -float("inf")
        with self._signals_passed_on():
            try:
                while queue or self.running:
                    self._collect()
                    if queue and self.signalled is None:
                        wait = last_start + self.stagger_s - time.monotonic()
                        if wait <= 0 and self._start(queue[0]):
                            queue.pop(0)
                            last_start = time.monotonic()
                            continue
                    if queue and self.signalled is not None:
                        for n in queue:
                            self.returns[n] = self._not_started(n)
                        queue.clear()
                    time.sleep(POLL_S)
            except BaseException:
                self._stop_all()
                raise
        return [self.returns[n] for n in range(len(self.jobs))]

    def _start(self, n: int) -> bool:
        job = self.jobs[n]
        ids = self.capacity.take(job.ranks, self.costs[n])
        if ids is None:
            return False
        env = pool_devices.environment(ids, self.cards, self.threads)
        process = start(job, self.sweep_dir, env, self._return_file(n))
        self.running[n] = (process, ids)
        log.info("trial job #%d started on device(s) %s (pid %d, output in %s)",
                 job.idx, ids, process.pid, job.job_dir / "launcher.log")  # fmt: skip
        return True

    def _collect(self) -> None:
        for n, (process, ids) in list(self.running.items()):
            code = process.poll()
            if code is None:
                continue
            del self.running[n]
            self.capacity.give_back(ids, self.costs[n])
            uuids = [self.cards.uuids[i] for i in ids] if self.cards.uuids else []
            ret = outcome(self.jobs[n], code, self._return_file(n), ids, uuids, self.signalled)
            self.returns[n] = ret
            if ret.status == JobStatus.COMPLETED:
                log.info("trial job #%d finished: %s", self.jobs[n].idx, ret.return_value)
            else:
                err = ret._return_value
                log.warning("trial job #%d ended: %s: %s", self.jobs[n].idx,
                            type(err).__name__, err)  # fmt: skip

    def _not_started(self, n: int) -> JobReturn:
        from litforge.sweeps.signals import NotStarted

        job = self.jobs[n]
        ret = JobReturn(overrides=job.overrides, hydra_cfg=job.config, status=JobStatus.FAILED)
        assert self.signalled is not None
        ret._return_value = NotStarted(self.signalled)
        return ret

    def _return_file(self, n: int) -> Path:
        return self.outbox / f"job{self.jobs[n].idx}.json"

    @contextlib.contextmanager
    def _signals_passed_on(self) -> Iterator[None]:
        """SIGTERM/SIGUSR1 to the sweep reach every running trial (each checkpoints and
        stops); no further trial starts. The handler before ours is called too (the Optuna
        sweep's watch); a default one (die) is honoured once the trials have stopped."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.getsignal(sig) for sig in SIGNALS}

        def forward(signum: int, frame: Any) -> None:
            self.signalled = self.signalled or signum
            for process, _ in self.running.values():
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signum)
            before = previous[signal.Signals(signum)]
            if callable(before):
                before(signum, frame)

        for sig in SIGNALS:
            signal.signal(sig, forward)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.signalled is not None and previous[signal.Signals(self.signalled)] in (
            signal.SIG_DFL,
            None,
        ):
            os.kill(os.getpid(), self.signalled)  # what the signal would have done to us

    def _stop_all(self) -> None:
        """Ctrl-C or a failure of the loop: SIGTERM to every trial (each checkpoints), then
        wait; SIGKILL for one that outlives KILL_AFTER_S."""
        for process, _ in self.running.values():
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        deadline = time.monotonic() + KILL_AFTER_S
        for process, _ in self.running.values():
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
