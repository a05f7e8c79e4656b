"""The processes of a run: how many start, how they meet, and how they end.

`prepare(trainer, settings)` runs in every process before the Trainer is built. `trainer`
holds the Trainer arguments of `KEYS` (accelerator, devices, num_nodes, strategy), handed
on as values by litforge.build; no other Trainer argument (precision, ...) comes here.

* under torchrun or srun the launcher's world decides `devices` and `num_nodes`;
* it refuses more processes than the machine can run (CPU cores, visible GPUs);
* in a rank that Lightning's launcher started (it re-executes `sys.argv` with LOCAL_RANK>=1)
  it makes the kernel kill the rank when the launcher dies, so no rank outlives its run;
* `bounded_strategy` turns `trainer.strategy=ddp` (and `auto` for several processes) into
  `litforge.launch.ddp.BoundedDDPStrategy` and `trainer.strategy=fsdp` into
  `litforge.launch.fsdp.ShardedStrategy`, the one place that maps those names: a bounded
  rendezvous (`processes.rendezvous_timeout_s`), bounded collectives
  (`processes.collective_timeout_s`), torchrun restarts that meet cleanly, and a process
  group destroyed before the interpreter shuts down (a gloo group left to interpreter
  shutdown can abort the process with "terminate called without an active exception").
  A strategy object (`trainer.strategy._target_`) is used as it is.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from typing import Any

import torch

from litforge.errors import ConfigError, LitforgeError
from litforge.launch.ddp import (  # noqa: F401 - end_process_group, RendezvousTimeout: public here too
    BoundedDDPStrategy,
    RendezvousTimeout,
    end_process_group,
)
from litforge.launch.fsdp import ShardedStrategy, is_fsdp_strategy
from litforge.launch.launchers import launched_by, launcher_world
from litforge.launch.settings import ProcessSettings

log = logging.getLogger("litforge")

# Set by a launcher for the ranks it starts: their parent's pid, to tell them apart from
# processes that merely inherited LOCAL_RANK.
LAUNCHER_PID = "LITFORGE_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# CPU processes per core that start with a warning (trying DDP on a laptop); past it, only
# with processes.oversubscribe=true.
CPU_PROCESSES_PER_CORE = 4
# The Trainer arguments that say how many processes start and how they meet: all of
# lightning.Trainer's arguments that this module reads or sets.
KEYS = ("accelerator", "devices", "num_nodes", "strategy")


class LauncherExited(LitforgeError):
    """This rank's launcher ended before the rank got going."""


def prepare(trainer: dict[str, Any], settings: ProcessSettings) -> None:
    """Check and adjust `trainer` (lightning.Trainer's `KEYS`, in place) for the processes
    they start; `settings` are the config's `processes.*`."""
    die_with_launcher()
    take_launcher_world(trainer)
    devices = trainer.get("devices", "auto")
    on_gpu = _on_gpu(str(trainer.get("accelerator", "auto")))
    per_node = check_device_count(devices, on_gpu, settings.oversubscribe)
    if per_node > 1:
        check_launcher_starts_ranks(devices)
    world = per_node * int(trainer.get("num_nodes", 1))
    trainer["strategy"] = bounded_strategy(trainer.get("strategy", "auto"), world, settings)
    if per_node > 1 and _launcher_pid() is None:
        os.environ[LAUNCHER_PID] = str(os.getpid())


def bounded_strategy(strategy: Any, world: int, settings: ProcessSettings) -> Any:
    """The strategy Lightning gets for `trainer.strategy` in a run of `world` processes:
    `fsdp` as ShardedStrategy; `ddp`, and `auto` where Lightning would pick its popen-based
    DDP (several processes, not an interactive session), as BoundedDDPStrategy; both with
    the `processes.*` timeouts. Any other name, or a strategy
    object, as given."""
    if not isinstance(strategy, str):
        return strategy
    rendezvous = float(settings.rendezvous_timeout_s)
    collectives = float(settings.collective_timeout_s)
    if is_fsdp_strategy(strategy):
        return ShardedStrategy(rendezvous, collectives)
    if strategy == "ddp" or (strategy == "auto" and world > 1 and not _interactive()):
        return BoundedDDPStrategy(rendezvous_timeout_s=rendezvous, collective_timeout_s=collectives)
    return strategy


def take_launcher_world(trainer: dict[str, Any]) -> None:
    """Under torchrun or srun the launcher has started the processes: its world decides.
    `trainer.devices=auto` and `trainer.num_nodes=1` (the defaults) take its shape (without
    this each process would train a copy of its own); values that contradict it stop here."""
    shape = launcher_world()
    if shape is None:
        return
    per_node, nodes = shape
    launcher = launched_by()
    devices = trainer.get("devices", "auto")
    request = parse_devices(devices)
    count = len(request) if isinstance(request, list) else request
    if count is None:
        trainer["devices"] = per_node
    elif count != per_node:
        raise ConfigError(
            f"trainer.devices={devices}, but {launcher} started {per_node} processes per node; "
            f"leave trainer.devices out (the launcher's count is taken) or make them agree"
        )
    num_nodes = int(trainer.get("num_nodes", 1))
    if num_nodes == 1:
        trainer["num_nodes"] = nodes
    elif num_nodes != nodes:
        raise ConfigError(
            f"trainer.num_nodes={num_nodes}, but {launcher} started {nodes} node(s) of "
            f"{per_node} processes; leave trainer.num_nodes out or make them agree"
        )


def check_device_count(devices: Any, on_gpu: bool, oversubscribe: bool = False) -> int:
    """Processes this node starts for `trainer.devices`; ConfigError past what it has."""
    request = parse_devices(devices)
    if on_gpu:
        return _check_gpus(devices, request)
    if not isinstance(request, int):
        return 1  # 'auto' is one CPU process; Lightning refuses the other forms on CPU
    cores = available_cores()
    if request <= cores or oversubscribe:
        return request
    most = CPU_PROCESSES_PER_CORE * cores
    if request > most:
        raise ConfigError(
            f"trainer.devices={devices} starts {request} processes, but this machine has "
            f"{cores} CPU cores for them (up to {CPU_PROCESSES_PER_CORE} per core start, "
            f"slowly); use trainer.devices={most} or fewer "
            "(processes.oversubscribe=true starts them anyway)"
        )
    if os.environ.get("LOCAL_RANK", "0") == "0":  # said once, by the launching process
        log.warning(
            "trainer.devices=%s starts %d processes on %d CPU cores: each step takes about "
            "%.3gx as long as with one process per core (fine for trying DDP)",
            devices, request, cores, request / cores,
        )  # fmt: skip
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


def parse_devices(devices: Any) -> int | list[int] | None:
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


def _interactive() -> bool:
    """Whether this is an interactive session, where Lightning's `auto` picks a forking DDP
    instead of the popen-based one (fabric.utilities.imports._IS_INTERACTIVE)."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def _launcher_pid() -> int | None:
    """The pid of the launcher that started this rank; None in a launcher or any other process.

    A torchrun worker (TORCHELASTIC_RUN_ID) was started by torchrun's agent, which ends its
    workers itself: a LAUNCHER_PID it inherited belongs to some process that ran litforge
    before launching torchrun (a notebook, a test session), not to its launcher."""
    pid = os.environ.get(LAUNCHER_PID)
    if pid is None or int(pid) == os.getpid() or os.environ.get("LOCAL_RANK", "0") == "0":
        return None
    if "TORCHELASTIC_RUN_ID" in os.environ:
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
