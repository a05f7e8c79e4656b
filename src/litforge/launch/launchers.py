"""One run directory for all processes of a run, whoever started them.

The run directory of an unnamed run is `outputs/<task>/<stamp>`. Lightning's own launcher
passes its directory to the ranks it starts (`hydra.run.dir=...`), but `torchrun` and
SLURM's `srun` start every rank as a fresh `python train.py ...`, and each would take its
own timestamp (issue 13: two directories, one of them holding only an empty checkpoints/).

`agree_on_stamp()` runs before Hydra in every process and makes all ranks share one stamp:

* under torchrun, rank 0 puts its timestamp in the store torchrun's agent already serves at
  MASTER_ADDR:MASTER_PORT for its workers (TORCHELASTIC_USE_AGENT_STORE) and the others
  read it from there, on every node;
* under srun (SLURM_NTASKS > 1), every task derives `slurm-<job id>` from the environment,
  so a requeued job (same id) finds its own directory again;
* the stamp travels in LITFORGE_RUN_STAMP, so processes a rank starts inherit it.

`conf/hydra/default.yaml` reads it through the `${litforge.stamp:}` resolver. A named run
(`run_name=...`) or an explicit `hydra.run.dir=...` needs none of this.
"""

from __future__ import annotations

import datetime
import os
import time

from omegaconf import OmegaConf

from litforge.errors import LitforgeError

STAMP_ENV = "LITFORGE_RUN_STAMP"
STAMP_FORMAT = "%Y-%m-%d_%H-%M-%S"
_STORE_KEY = "litforge/run_stamp"


class NoSharedStamp(LitforgeError):
    """A torchrun worker could not learn rank 0's run directory."""


def stamp() -> str:
    """The agreed stamp, or this moment's (a single-process run)."""
    return os.environ.get(STAMP_ENV) or time.strftime(STAMP_FORMAT)


# Cached per config, as Hydra's own ${now:} is: hydra.run.dir resolves more than once.
OmegaConf.register_new_resolver("litforge.stamp", stamp, replace=True, use_cache=True)


def launched_by() -> str | None:
    """ "torchrun", "slurm" (srun with several tasks) or None (one process, or Lightning's
    launcher, which passes hydra.run.dir itself)."""
    if os.environ.get("TORCHELASTIC_RUN_ID") is not None and "MASTER_ADDR" in os.environ:
        return "torchrun"
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ:
        return "slurm"
    return None


def launcher_world() -> tuple[int, int] | None:
    """(processes per node, nodes) that torchrun or srun started; None for any other start."""
    kind = launched_by()
    if kind == "torchrun":
        world = int(os.environ.get("WORLD_SIZE", "1"))
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    elif kind == "slurm":
        world = int(os.environ["SLURM_NTASKS"])
        nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", os.environ.get("SLURM_NNODES", "1")))
        per_node = max(1, world // max(1, nodes))
    else:
        return None
    return per_node, max(1, world // max(1, per_node))


def agree_on_stamp(overrides: list[str], timeout_s: float = 600.0) -> None:
    """Set LITFORGE_RUN_STAMP to the stamp every rank of this run uses (see the docstring)."""
    if os.environ.get(STAMP_ENV) or any(o.startswith("hydra.run.dir=") for o in overrides):
        return
    launcher = launched_by()
    if launcher == "slurm":
        job = os.environ.get("SLURM_ARRAY_JOB_ID")
        job = f"{job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if job else os.environ["SLURM_JOB_ID"]
        os.environ[STAMP_ENV] = f"slurm-{job}"
    elif launcher == "torchrun":
        os.environ[STAMP_ENV] = _torchrun_stamp(timeout_s)


def _torchrun_stamp(timeout_s: float) -> str:
    from torch.distributed import TCPStore

    address = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    try:
        store = TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            is_master=False,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        if int(os.environ.get("RANK", "0")) == 0:
            # compare_set keeps a stamp already there: an elastic restart of the group
            # (same agent store) goes on in the same directory.
            return store.compare_set(_STORE_KEY, "", time.strftime(STAMP_FORMAT)).decode()
        return store.get(_STORE_KEY).decode()
    except (RuntimeError, OSError) as err:  # DistStoreError is a RuntimeError
        raise NoSharedStamp(
            f"could not learn rank 0's run directory from torchrun's store at "
            f"MASTER_ADDR:MASTER_PORT={address} within {timeout_s:g} s ({err}); "
            "pass run_name=NAME or hydra.run.dir=PATH to every rank instead"
        ) from None
