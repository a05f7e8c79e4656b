"""The device pool of `hydra/launcher=gpus` at work: jobs started as their devices free (in
this sweep, and leased from the machine's other sweeps), staggered; the sweep's signals
passed on to the running trials, and what outlives the grace period killed; every outcome
collected. `launcher` builds it and hands it its jobs (a list, or a feed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn, JobStatus

from litforge.errors import ConfigError
from litforge.sweeps.pool import devices as pool_devices
from litforge.sweeps.pool import packing, settings
from litforge.sweeps.pool.capacity import Capacity
from litforge.sweeps.pool.feed import LATER
from litforge.sweeps.pool.leases import Leases
from litforge.sweeps.pool.trial_process import Job, PoolJobReturn, outcome, refused, start

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from litforge.sweeps.pool.feed import Feed

log = logging.getLogger("litforge")
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
POLL_S = 0.1
# Past a trial's own grace period (its guard kills it then), the sweep kills its group.
SWEEP_MARGIN_S = 5.0


class DevicePool:
    def __init__(self, ids: list[int], cards: pool_devices.Cards, threads: int | None,
                 sweep_dir: Path) -> None:  # fmt: skip
        self.ids, self.cards, self.threads, self.sweep_dir = ids, cards, threads, sweep_dir
        self.planner: packing.Planner | None = None
        self.capacity: Capacity | None = None  # set by the first jobs (their budgets)
        self.costs: dict[int, float] = {}
        self.loader: Any = None
        self.master: DictConfig | None = None
        self.stagger_s, self.kill_after_s = 0.0, settings.LauncherSettings.kill_after_s
        self.leases: Leases | None = None
        self.entry: list[str] | None = None
        self.feed: Feed | None = None  # trial by trial; None: the jobs in `pending` only
        self.at_once = 0
        self.ranks_hint = 1  # devices the next trial is expected to take
        self.pending: list[Job] = []  # composed, not started
        self.returns: dict[int, JobReturn] = {}
        self.running: dict[int, tuple[Job, subprocess.Popen, list[int], float]] = {}
        self.signalled: int | None = None
        self.signalled_at = 0.0
        self.outbox = sweep_dir / ".launcher"
        self.waits_said: set[tuple[int, ...]] = set()
        self.lifeline = -1  # the pipe's write end: open for as long as this sweep lives

    def check_ranks(self, job: Job) -> None:
        if job.ranks > len(self.ids):
            raise ConfigError(
                f"trainer.devices={job.ranks} in job #{job.idx}, but hydra.launcher.devices "
                f"has {len(self.ids)} ({self.ids}); give trainer.devices={len(self.ids)} or "
                "fewer, or more devices"
            )

    def run(self) -> None:
        self.outbox.mkdir(exist_ok=True)
        asking = self.feed is not None
        last_start = -float("inf")
        read_end, self.lifeline = os.pipe()  # not inherited: only this process writes
        with self._signals_passed_on():
            try:
                while self.pending or self.running or asking:
                    self._collect()
                    if self.signalled is not None:
                        asking = False
                        for job in self.pending:
                            self._ended(job, self._not_started(job))
                        self.pending.clear()
                    if asking and not self.pending and self._room():
                        asking = self._ask()
                        if self.pending:
                            continue  # start it at once
                    if self.pending and self.signalled is None:
                        wait = last_start + self.stagger_s - time.monotonic()
                        if wait <= 0 and self._start(self.pending[0], read_end):
                            self.pending.pop(0)
                            last_start = time.monotonic()
                            continue
                    if self.signalled is not None and time.monotonic() > (
                        self.signalled_at + self.kill_after_s + SWEEP_MARGIN_S
                    ):
                        self._kill_all()  # a guard that did not do it (never expected)
                    time.sleep(POLL_S)
            except BaseException:
                self._stop_all()
                raise
            finally:
                os.close(read_end)
                os.close(self.lifeline)
                if self.leases is not None:
                    self.leases.release_all()

    def _room(self) -> bool:
        """Whether the next trial would start now: fewer than `at_once` run, and devices
        for it are free here and not leased by another process (those it would take stay
        held until it starts)."""
        if len(self.running) >= self.at_once:
            return False
        capacity = self.capacity or Capacity(dict.fromkeys(self.ids, 1.0))
        cost = min(self.costs.values(), default=1.0) if self.capacity else 1.0
        usable = None if self.leases is None else self._leasable
        if capacity.choose(self.ranks_hint, cost, usable) is not None:
            return True
        if self.leases is not None:
            self.leases.release_idle()
            if capacity.choose(self.ranks_hint, cost) is not None:
                self._say_waiting("the next trial", capacity)
        return False

    def _ask(self) -> bool:
        """The feed's next job into `pending`; whether to ask again later."""
        assert self.feed is not None
        got = self.feed.ask()
        if got is None or got == LATER:
            if self.leases is not None:
                self.leases.release_idle()  # held for a trial that did not come
            return got is not None
        idx, overrides = got
        job = Job.compose(idx, list(overrides), self.loader, self.master)
        try:
            self.check_ranks(job)
            assert self.planner is not None
            if self.capacity is None:
                self.capacity = Capacity(self.planner.capacity([job.config]))
            self.costs[idx] = self.planner.cost(job.config)
        except ConfigError as err:  # the sweep stops on it, as on a job's config error
            self._ended(job, refused(job, err))
            return True
        self.ranks_hint = job.ranks
        self.pending.append(job)
        return True

    def _ended(self, job: Job, ret: JobReturn) -> None:
        self.returns[job.idx] = ret
        if self.feed is not None:
            self.feed.told(job.idx, ret)

    def _start(self, job: Job, lifeline: int) -> bool:
        assert self.capacity is not None
        usable = None if self.leases is None else self._leasable
        ids = self.capacity.take(job.ranks, self.costs[job.idx], usable)
        if self.leases is not None:
            if ids is not None:
                self.leases.use(self._keys(ids))
            self.leases.release_idle()  # those taken on the way and not used
        if ids is None:
            if self.leases is not None and self.capacity.choose(job.ranks, self.costs[job.idx]):
                self._say_waiting(f"trial job #{job.idx}", self.capacity)
            return False
        env = pool_devices.environment(ids, self.cards, self.threads)
        process = start(job, self.sweep_dir, env, self._return_file(job), lifeline,
                        self.kill_after_s, self.entry)  # fmt: skip
        self.running[job.idx] = (job, process, ids, time.time())
        log.info("trial job #%d started on device(s) %s (pid %d, output in %s)",
                 job.idx, ids, process.pid, job.job_dir / "launcher.log")  # fmt: skip
        return True

    def _keys(self, ids: list[int]) -> list[str]:
        """What identifies each device across processes: its GPU's UUID, else its id as the
        machine numbers it (through this process's CUDA_VISIBLE_DEVICES)."""
        if self.cards.uuids:
            return [self.cards.uuids[i] for i in ids]
        return pool_devices.cuda_mask(ids).split(",")

    def _leasable(self, i: int) -> bool:
        assert self.leases is not None
        return self.leases.try_hold(self._keys([i])[0])

    def _say_waiting(self, what: str, capacity: Capacity) -> None:
        """One line per set of devices another process holds: which, and who."""
        assert self.leases is not None
        held = [i for i in capacity.free if capacity.free[i] > 0
                and not self._leasable(i)]  # fmt: skip
        self.leases.release_idle()
        if not held or tuple(held) in self.waits_said:
            return
        self.waits_said.add(tuple(held))
        holders = sorted({self.leases.holder(k) or "another process" for k in self._keys(held)})
        log.warning(
            "%s waits: device(s) %s are in use by %s on this machine (device leases "
            "in %s; hydra.launcher.share_devices=true would run beside it)",
            what, held, ", ".join(holders), self.leases.directory,
        )  # fmt: skip

    def _collect(self) -> None:
        for n, (job, process, ids, started) in list(self.running.items()):
            code = process.poll()
            if code is None:
                continue
            del self.running[n]
            if code == -signal.SIGKILL:  # the guard was killed: what it led may be left
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)  # a live group keeps its id
            assert self.capacity is not None
            self.capacity.give_back(ids, self.costs[n])
            if self.leases is not None:
                self.leases.done(self._keys(ids))
            uuids = [self.cards.uuids[i] for i in ids] if self.cards.uuids else []
            ret = outcome(job, code, self._return_file(job), ids, uuids, self.signalled,
                          self.kill_after_s)  # fmt: skip
            ret.duration_s = time.time() - started
            if ret.status == JobStatus.COMPLETED:
                log.info("trial job #%d finished: %s", job.idx, ret.return_value)
            else:
                err = ret._return_value
                log.warning("trial job #%d ended: %s: %s", job.idx,
                            type(err).__name__, err)  # fmt: skip
            self._ended(job, ret)

    def _not_started(self, job: Job) -> JobReturn:
        from litforge.sweeps.signals import NotStarted

        ret = PoolJobReturn(overrides=job.overrides, hydra_cfg=job.config, status=JobStatus.FAILED)
        assert self.signalled is not None
        ret._return_value = NotStarted(self.signalled)
        return ret

    def _return_file(self, job: Job) -> Path:
        return self.outbox / f"job{job.idx}.json"

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
            if self.signalled is None:
                self.signalled, self.signalled_at = signum, time.monotonic()
            for _, process, _, _ in self.running.values():
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
        """Ctrl-C or a failure of the loop: SIGTERM to every trial (each checkpoints; its
        guard kills it kill_after_s later), then wait; the sweep kills what is left."""
        for _, process, _, _ in self.running.values():
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        deadline = time.monotonic() + self.kill_after_s + SWEEP_MARGIN_S
        for _, process, _, _ in self.running.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
        self._kill_all()

    def _kill_all(self) -> None:
        """SIGKILL to the process group of every trial still running (its guard leads it)."""
        for _, process, _, _ in self.running.values():
            if process.poll() is None:  # not reaped: its pid is still its group's id
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
