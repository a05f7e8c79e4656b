"""Lightning's DDP strategy with a bounded rendezvous, elastic restarts and a clean end
(the rendezvous part, `BoundedRendezvous`, is FSDP's too: litforge.launch.fsdp).

`trainer.strategy=ddp` (`trainer=ddp`), and `auto` in a run of several processes, run as
`BoundedDDPStrategy` (`litforge.launch.processes.bounded_strategy` maps the name). On top
of Lightning's:

* the rendezvous says what it waits for and gives up after `processes.rendezvous_timeout_s`;
* every collective gives up after `processes.collective_timeout_s` (Lightning's `timeout`),
  so a rank that hangs (a stopped process, a wedged GPU) ends the run instead of holding
  the others forever; under `torchrun --max-restarts` the group then restarts and resumes;
* under torchrun, each restart of the group meets in keys of its own (see `_attempt_store`);
* the process group is destroyed before the interpreter shuts down.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.strategies import DDPStrategy as LightningDDPStrategy

from litforge.errors import LitforgeError
from litforge.launch.settings import ProcessSettings

log = logging.getLogger("litforge")

# The defaults of a strategy built outside a config (a user's own `_target_`) are the
# config's: one home, launch.settings.
RENDEZVOUS_TIMEOUT_S = float(ProcessSettings.rendezvous_timeout_s)
COLLECTIVE_TIMEOUT_S = float(ProcessSettings.collective_timeout_s)  # torch's and Lightning's


class RendezvousTimeout(LitforgeError):
    """The processes of a distributed run did not all meet in time."""


class BoundedRendezvous:
    """What litforge adds to a Lightning strategy of several processes (DDP, FSDP): an
    announced rendezvous with a deadline, the torchrun restart keys, and a clean end.

    Mixed in before the Lightning strategy class, whose `num_nodes`, `local_rank`,
    `cluster_environment`, `_timeout` etc. it uses.
    """

    rendezvous_timeout_s: float = RENDEZVOUS_TIMEOUT_S
    _failed = False

    def _meet(self: Any, lightning_setup: Callable[[], None]) -> None:
        """Make the process group (bounded), then let Lightning's `lightning_setup` keep it."""
        if torch.distributed.is_initialized():  # trainer.test after trainer.fit: same group
            lightning_setup()
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
            store = _attempt_store(self._timeout)
            if store is not None:
                reset_seed()
                self.set_world_ranks()
                self._process_group_backend = self._get_process_group_backend()
                torch.distributed.init_process_group(
                    self._process_group_backend, store=store, rank=self.global_rank,
                    world_size=self.world_size, timeout=self._timeout,
                )  # fmt: skip
            lightning_setup()  # with the group made above, Lightning's keeps it
        atexit.register(self._end_process_group)

    def on_exception(self, exception: BaseException) -> None:
        self._failed = True
        super().on_exception(exception)  # type: ignore[misc]

    def _waiting_for(self: Any) -> str:
        return (
            f"{self.num_nodes * self.num_processes} processes (trainer.num_nodes={self.num_nodes}"
            f" x {self.num_processes} per node) at MASTER_ADDR:MASTER_PORT={self._address()}"
        )

    def _address(self: Any) -> str:
        env = self.cluster_environment
        return f"{env.main_address}:{env.main_port}" if env is not None else "?"

    def _hint(self: Any) -> str:
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


class BoundedDDPStrategy(BoundedRendezvous, LightningDDPStrategy):
    """Lightning's DDP with an announced, bounded rendezvous and a clean end.

    `timeout` (Lightning's, default 30 min) still bounds every collective; the rendezvous
    gets its own, shorter deadline, since the same timeout would also cut off a rank that
    waits while another writes a large checkpoint.
    """

    def __init__(
        self,
        rendezvous_timeout_s: float = RENDEZVOUS_TIMEOUT_S,
        collective_timeout_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        if collective_timeout_s is not None:  # Lightning's `timeout`, in seconds for a config
            kwargs["timeout"] = datetime.timedelta(seconds=float(collective_timeout_s))
        super().__init__(**kwargs)
        self.rendezvous_timeout_s = float(rendezvous_timeout_s)

    def setup_distributed(self) -> None:
        self._meet(super().setup_distributed)


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
        # os._exit skips the interpreter's exit: release the run's locks (registered with
        # atexit by checkpointing.lock) and drop a run directory that holds nothing yet.
        atexit._run_exitfuncs()
        from litforge.exits import remove_unused_run_dir

        remove_unused_run_dir()
        os._exit(error.exit_code)

    threading.Thread(target=expire, name="litforge-rendezvous-deadline", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def _attempt_store(timeout: datetime.timedelta | None) -> Any:
    """Under torchrun: the agent's store, with the keys of this restart of the group apart.

    torch 2.13 reuses the agent's store across `--max-restarts` restarts without separating
    the attempts' keys (pytorch/pytorch#135712): a rank that reaches the rendezvous before a
    slower rank 0 reads rank 0's address of the previous attempt and fails with "Connection
    refused", every restart. Reproduced here with a plain two-process gloo script.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    from torch.distributed import PrefixStore, TCPStore

    client = TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
        timeout=timeout or datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )  # fmt: skip
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return PrefixStore(f"litforge/attempt-{attempt}", client)
