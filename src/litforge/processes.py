"""The processes of a run: how many start, how they meet, and how they end.

`prepare(cfg, trainer_kwargs)` runs in every process before the Trainer is built:

* it refuses more processes than the machine can run (CPU cores, visible GPUs);
* in a rank that Lightning's launcher started (it re-executes `sys.argv` with LOCAL_RANK>=1)
  it makes the kernel kill the rank when the launcher dies, so no rank outlives its run;
* for a run of several processes it swaps strategy `auto`/`ddp` for `BoundedDDPStrategy` below:
  Lightning's, plus a rendezvous that says what it waits for and gives up after
  `processes.rendezvous_timeout_s`, plus a process group destroyed before the interpreter
  shuts down (a gloo group left to interpreter shutdown can abort the process with
  "terminate called without an active exception").
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import torch
from lightning.pytorch.strategies import DDPStrategy as LightningDDPStrategy
from omegaconf import DictConfig

from litforge.errors import ConfigError, LitforgeError

log = logging.getLogger("litforge")

RENDEZVOUS_TIMEOUT_S = 600.0
# Set by a launcher for the ranks it starts: their parent's pid, to tell them apart from
# processes that merely inherited LOCAL_RANK.
LAUNCHER_PID = "LITFORGE_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class RendezvousTimeout(LitforgeError):
    """The processes of a distributed run did not all meet in time."""


class LauncherExited(LitforgeError):
    """This rank's launcher ended before the rank got going."""


def prepare(cfg: DictConfig, trainer_kwargs: dict[str, Any]) -> None:
    """Check and adjust `trainer_kwargs` (lightning.Trainer's) for the processes they start."""
    die_with_launcher()
    settings = cfg.get("processes") or {}
    timeout = settings.get("rendezvous_timeout_s", RENDEZVOUS_TIMEOUT_S)  # schema.py checked it
    devices = trainer_kwargs.get("devices", "auto")
    on_gpu = _on_gpu(str(trainer_kwargs.get("accelerator", "auto")))
    per_node = check_device_count(devices, on_gpu, bool(settings.get("oversubscribe", False)))
    if per_node > 1:
        check_launcher_starts_ranks(devices)
    world = per_node * int(trainer_kwargs.get("num_nodes", 1))
    if world > 1 and _plain_ddp(trainer_kwargs.get("strategy", "auto")):
        trainer_kwargs["strategy"] = BoundedDDPStrategy(rendezvous_timeout_s=float(timeout))
    if per_node > 1 and _launcher_pid() is None:
        os.environ[LAUNCHER_PID] = str(os.getpid())


def check_device_count(devices: Any, on_gpu: bool, oversubscribe: bool = False) -> int:
    """Processes this node starts for `trainer.devices`; ConfigError past what it has."""
    request = _parse_devices(devices)
    if on_gpu:
        return _check_gpus(devices, request)
    if not isinstance(request, int):
        return 1  # 'auto' is one CPU process; Lightning refuses the other forms on CPU
    cores = available_cores()
    if request > cores and not oversubscribe:
        raise ConfigError(
            f"trainer.devices={devices} starts {request} processes, but this machine has "
            f"{cores} CPU cores for them; use trainer.devices={cores} or fewer "
            "(processes.oversubscribe=true starts them anyway)"
        )
    return request


def check_launcher_starts_ranks(devices: Any) -> None:
    """Lightning starts a run's other ranks by re-running the entry script (train.py). A
    sweep job that a launcher runs in a worker process of its own (joblib, submitit_local)
    has no entry script to re-run; on SLURM the ranks are SLURM's tasks instead."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or "SLURM_NTASKS" in os.environ:
        return
    hydra = HydraConfig.get()
    launcher = str(hydra.launcher.get("_target_", ""))
    if hydra.mode != RunMode.MULTIRUN or launcher.endswith(".BasicLauncher"):
        return
    raise ConfigError(
        f"trainer.devices={devices} in a sweep whose launcher ({launcher.rsplit('.', 1)[-1]}) "
        "runs each job in a worker process: Lightning cannot start the other ranks from "
        "there. Use the basic launcher for DDP trials (one trial at a time), or "
        "hydra/launcher=slurm with tasks_per_node equal to trainer.devices"
    )


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which containers narrow)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _check_gpus(devices: Any, request: int | list[int] | None) -> int:
    visible = torch.cuda.device_count()
    if request is None:  # 'auto' or -1: every visible GPU
        return max(visible, 1)
    wanted = request if isinstance(request, int) else len(request)
    missing = [i for i in request if i >= visible] if isinstance(request, list) else []
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={mask})" if mask is not None else ""
    if missing:
        have = f"only ids 0..{visible - 1} are" if visible else "no GPU is"
        raise ConfigError(
            f"trainer.devices={devices} names GPU ids {missing}, but {have} visible{where}"
        )
    if wanted > visible:
        verb = "is" if visible == 1 else "are"
        raise ConfigError(
            f"trainer.devices={devices} asks for {wanted} GPUs, but {visible or 'none'} {verb} "
            f"visible{where}; use trainer.devices={visible} or fewer"
        )
    return wanted


def _parse_devices(devices: Any) -> int | list[int] | None:
    """A count, a list of ids, or None for 'all' ('auto', -1); the forms Lightning accepts."""
    if devices in ("auto", -1, "-1") or isinstance(devices, bool):
        return None
    if isinstance(devices, str):
        parts = [p.strip() for p in devices.split(",") if p.strip()]
        if not all(p.isdigit() for p in parts) or not parts:
            return None
        ids = [int(p) for p in parts]
        return ids[0] if len(ids) == 1 and "," not in devices else ids
    if isinstance(devices, (list, tuple)):
        return [int(i) for i in devices]
    return int(devices) if isinstance(devices, int) else None


def _on_gpu(accelerator: str) -> bool:
    if accelerator in ("gpu", "cuda"):
        return True
    return accelerator == "auto" and torch.cuda.is_available()


def _plain_ddp(strategy: Any) -> bool:
    """Whether Lightning would run `strategy` of several processes as its popen-based DDP."""
    # In an interactive session `auto` picks a forking DDP instead (Lightning's test,
    # fabric.utilities.imports._IS_INTERACTIVE).
    interactive = hasattr(sys, "ps1") or bool(sys.flags.interactive)
    return strategy == "ddp" or (strategy == "auto" and not interactive)


def _launcher_pid() -> int | None:
    """The pid of the launcher that started this rank; None in a launcher or any other process."""
    pid = os.environ.get(LAUNCHER_PID)
    if pid is None or int(pid) == os.getpid() or os.environ.get("LOCAL_RANK", "0") == "0":
        return None
    return int(pid)


def die_with_launcher() -> None:
    """In a rank started by our launcher: the kernel SIGKILLs it when the launcher dies.

    SIGKILL, as Lightning's own child-process observer sends: a rank blocked in a collective
    ignores SIGTERM (Lightning's handler and litforge's preemption handler only record it).
    """
    launcher = _launcher_pid()
    if launcher is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
    # The death signal covers a parent that dies from now on; one already gone left us
    # re-parented (to init or a subreaper).
    if os.getppid() != launcher:
        raise LauncherExited(
            f"the launching process (pid {launcher}) has exited; rank "
            f"{os.environ.get('LOCAL_RANK')} stops"
        )


class BoundedDDPStrategy(LightningDDPStrategy):
    """Lightning's DDP with an announced, bounded rendezvous and a clean end.

    `timeout` (Lightning's, default 30 min) still bounds every collective; the rendezvous
    gets its own, shorter deadline, since the same timeout would also cut off a rank that
    waits while another writes a large checkpoint.
    """

    def __init__(self, rendezvous_timeout_s: float = RENDEZVOUS_TIMEOUT_S, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rendezvous_timeout_s = rendezvous_timeout_s
        self._failed = False

    def setup_distributed(self) -> None:
        if torch.distributed.is_initialized():  # trainer.test after trainer.fit: same group
            super().setup_distributed()
            return
        if self.num_nodes > 1 and self.local_rank == 0:
            log.info(
                "node %d: waiting up to %g s for %s; %s",
                self.node_rank, self.rendezvous_timeout_s, self._waiting_for(), self._hint(),
            )  # fmt: skip
        timeout = RendezvousTimeout(
            f"gave up after {self.rendezvous_timeout_s:g} s waiting for {self._waiting_for()}; "
            f"{self._hint()}, or raise processes.rendezvous_timeout_s"
        )
        with _deadline(self.rendezvous_timeout_s, timeout, quiet=self.local_rank != 0):
            super().setup_distributed()
        atexit.register(self._end_process_group)

    def on_exception(self, exception: BaseException) -> None:
        self._failed = True
        super().on_exception(exception)

    def _waiting_for(self) -> str:
        return (
            f"{self.num_nodes * self.num_processes} processes (trainer.num_nodes={self.num_nodes}"
            f" x {self.num_processes} per node) at MASTER_ADDR:MASTER_PORT={self._address()}"
        )

    def _address(self) -> str:
        env = self.cluster_environment
        return f"{env.main_address}:{env.main_port}" if env is not None else "?"

    def _hint(self) -> str:
        if self.num_nodes == 1:
            return "a process of this machine did not start (see its output above)"
        address, port = self._address().rsplit(":", 1)
        others = "1" if self.num_nodes == 2 else f"1..{self.num_nodes - 1}"
        hint = (
            f"start the other nodes with the same command and MASTER_ADDR={address} "
            f"MASTER_PORT={port} NODE_RANK={others}"
        )
        if address in ("127.0.0.1", "localhost"):
            hint += " (MASTER_ADDR: an address of this machine that they reach, set here too)"
        return hint

    def _end_process_group(self) -> None:
        # Not after a failure: another rank may still be inside a collective with this one,
        # and destroying the group would wait for it.
        if not self._failed:
            end_process_group()


def end_process_group() -> None:
    """Destroy the default process group while the interpreter is still whole.

    Lightning does this at exit for NCCL only (fabric.utilities.distributed
    `_init_dist_connection`); a gloo group left to interpreter shutdown can abort the process.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@contextlib.contextmanager
def _deadline(seconds: float, error: LitforgeError, quiet: bool = False) -> Iterator[None]:
    """End the process with `error` as one line if the block has not finished in `seconds`.

    A thread, because the rendezvous blocks in C++ (the TCPStore) where no Python exception
    or signal handler can reach it; it releases the GIL, so the thread runs meanwhile.
    """
    done = threading.Event()

    def expire() -> None:
        if done.wait(seconds):
            return
        if not quiet:
            sys.stdout.flush()
            print(f"error: {error}", file=sys.stderr, flush=True)
        os._exit(error.exit_code)

    threading.Thread(target=expire, name="litforge-rendezvous-deadline", daemon=True).start()
    try:
        yield
    finally:
        done.set()
