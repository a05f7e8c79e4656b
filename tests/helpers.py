"""What tests share: the repo root, a tiny GPT, running the entry points as subprocesses,
and callbacks that tests inject into real training runs via `+callbacks.NAME=...`."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch

from litforge.conf import LIBRARY_CONF_DIR

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"  # the project's groups; litforge's are LIBRARY_CONF_DIR

# Small enough that a GPT step takes milliseconds on one CPU core.
TINY_GPT = [
    "experiment=gpt_char",
    "data.block_size=32",
    "data.batch_size=8",
    "model.net.n_layer=1",
    "model.net.n_embd=32",
    "model.net.n_head=2",
]


def run_entry(
    script: str, *args: str, run_dir: Path, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    """`python {script} {args}` at the repo root with its run directory at run_dir."""
    full_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    full_env.update(PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(
        [sys.executable, script, *args, f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class KillAtStep(L.Callback):
    """SIGKILL this process (every rank) once `step` optimizer steps are done: a lost VM."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class RaiseAtStep(L.Callback):
    """Raise once `step` optimizer steps are done: a crash this process survives (in-process
    tests; KillAtStep for a real kill)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"crash at step {self.step} (tests.helpers.RaiseAtStep)")


class SignalAtStep(L.Callback):
    """Send `signum` to rank 0's process at `step`, as a cloud's spot notice would."""

    def __init__(self, step: int, signum: int = signal.SIGTERM) -> None:
        self.step = step
        self.signum = signum
        self.sent = False

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step and trainer.is_global_zero and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)


# The S3 server of the running test, for callbacks that simulate an outage in-process.
CURRENT_S3: Any = None


class StoreOutage(L.Callback):
    """Stop the test's S3 server after `stop_at` steps; start it again after `restart_at`."""

    def __init__(self, stop_at: int, restart_at: int | None = None) -> None:
        self.stop_at = stop_at
        self.restart_at = restart_at

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.stop_at and CURRENT_S3.process is not None:
            CURRENT_S3.stop()
        if trainer.global_step == self.restart_at and CURRENT_S3.process is None:
            CURRENT_S3.start()  # moto forgets everything: the bucket is made anew


class RecordHparams(L.Callback):
    """Each rank writes the base learning rate its optimizer trains with (before the
    scheduler's warmup factor) to run_dir/ranks/rank{R}.json."""

    def on_train_start(self, trainer: L.Trainer, *args: Any) -> None:
        group = trainer.optimizers[0].param_groups[0]
        record = {"lr": group.get("initial_lr", group["lr"]), "rank": trainer.global_rank}
        out = Path(trainer.default_root_dir) / "ranks" / f"rank{trainer.global_rank}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record))


class RecordValidations(L.Callback):
    """Append the global step of each validation (sanity checks aside) to
    run_dir/validations.txt, one line each, on rank 0."""

    def on_validation_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        with (Path(trainer.default_root_dir) / "validations.txt").open("a") as f:
            f.write(f"{trainer.global_step}\n")


class PoisonStep(L.Callback):
    """Multiply the net's output by inf in the training batch of global step `step`, so
    that batch's loss and every gradient are non-finite (what callbacks.numerics catches).

    `+callbacks.poison._target_=tests.helpers.PoisonStep +callbacks.poison.step=K`; hooks
    the module's `net` (litforge's and lightning-hydra-template's modules have one, and the
    latter call `self.forward`, which module hooks do not see), else the module itself.
    """

    def __init__(self, step: int) -> None:
        self.step = step
        self._trainer: L.Trainer | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._trainer is None:
            self._trainer = trainer
            getattr(pl_module, "net", pl_module).register_forward_hook(self._poison)

    def _poison(self, module: Any, args: Any, output: Any) -> Any:
        if module.training and self._trainer.global_step == self.step:
            return output * float("inf")
        return None


def poison(step: int) -> list[str]:
    """The overrides that add PoisonStep at `step` to a run."""
    return ["+callbacks.poison._target_=tests.helpers.PoisonStep", f"+callbacks.poison.step={step}"]


class RecordShard(L.Callback):
    """Each rank writes the dataset indices its training sampler yields in the first epoch,
    and the sampler's type, to run_dir/shards/rank{R}.json."""

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.current_epoch != 0:
            return
        sampler = trainer.train_dataloader.sampler
        record = {"sampler": type(sampler).__name__, "indices": [int(i) for i in sampler]}
        out = Path(trainer.default_root_dir) / "shards" / f"rank{trainer.global_rank}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record))


def conf_groups() -> list[str]:
    """Every config group, the project's (conf/) and litforge's, Hydra's own left out."""
    dirs = [*CONF.iterdir(), *LIBRARY_CONF_DIR.iterdir()]
    return sorted({p.name for p in dirs if p.is_dir() and p.name not in ("hydra", "litforge")})


def conf_options(group: str) -> list[str]:
    """The options of `group` from both places (a project file shadows the library's)."""
    found = [*(CONF / group).glob("*.yaml"), *(LIBRARY_CONF_DIR / group).glob("*.yaml")]
    return sorted({p.stem for p in found})


class OutOfMemoryAt(L.Callback):
    """Raise torch.OutOfMemoryError in one phase of optimizer step `step`, as CUDA's
    allocator would: forward (inside the module's forward), backward, optimizer,
    validation, sanity (the check before training), between (a hook after the step)."""

    HOOKS = {
        "backward": "on_before_backward",
        "optimizer": "on_before_optimizer_step",
        "validation": "on_validation_batch_start",
        "sanity": "on_validation_batch_start",
        "between": "on_train_batch_end",
    }

    def __init__(self, phase: str, step: int = 2) -> None:
        self.phase, self.step = phase, step
        if phase in self.HOOKS:
            setattr(self, self.HOOKS[phase], self._maybe_raise)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.phase == "forward":
            pl_module.register_forward_pre_hook(
                lambda module, _: self._maybe_raise(trainer) if module.training else None
            )

    def _maybe_raise(self, trainer: L.Trainer, *args: Any) -> None:
        if self.phase == "sanity":
            due = trainer.sanity_checking
        else:
            due = trainer.global_step >= self.step and not trainer.sanity_checking
        if due:
            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 2.00 GiB (tests.helpers.OutOfMemoryAt)"
            )


class OutOfMemoryAbove(L.Callback):
    """Raise torch.OutOfMemoryError, as CUDA's allocator would, from the net's forward
    (a pre-hook on each submodule) or from `on_before_backward` when the micro-batch the
    net last saw has more than `above` samples; or, with phase="optimizer", once from
    `on_before_optimizer_step` at optimizer step `step`."""

    def __init__(self, phase: str, above: int = 0, step: int = 2) -> None:
        self.phase, self.above, self.step = phase, above, step
        self.seen = 0  # the last micro-batch the net's forward saw
        self.raised = 0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for module in pl_module.children():
            module.register_forward_pre_hook(self._forward)

    def _forward(self, module: Any, inputs: tuple[Any, ...]) -> None:
        if not inputs or not isinstance(inputs[0], torch.Tensor) or not module.training:
            return
        self.seen = inputs[0].size(0)
        if self.phase == "forward" and self.seen > self.above:
            self._raise()

    def on_before_backward(self, *args: Any) -> None:
        if self.phase == "backward" and self.seen > self.above:
            self._raise()

    def on_before_optimizer_step(self, trainer: L.Trainer, *args: Any) -> None:
        if self.phase == "optimizer" and trainer.global_step == self.step and not self.raised:
            self._raise()

    def _raise(self) -> None:
        self.raised += 1
        raise torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate 2.00 GiB (micro-batch {self.seen})"
        )


class RecordStart(L.Callback):
    """Saves the weights and the optimizer's state as training starts (after Lightning and
    every callback set them up) to run_dir/start.pt."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        state = {"weights": {k: v.detach().clone() for k, v in pl_module.state_dict().items()},
                 "optimizer": trainer.optimizers[0].state_dict()}  # fmt: skip
        torch.save(state, Path(trainer.default_root_dir) / "start.pt")


class RecordSamples(L.Callback):
    """Each rank appends, per training batch, the epoch, the optimizer step and a hash of
    each sample's input to run_dir/samples/rank{R}.jsonl (a resumed run appends too)."""

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, *_: Any) -> None:
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        hashes = [hashlib.sha1(row.cpu().numpy().tobytes()).hexdigest()[:16] for row in x]
        out = Path(trainer.default_root_dir) / "samples" / f"rank{trainer.global_rank}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as file:
            record = {"epoch": trainer.current_epoch, "step": trainer.global_step, "x": hashes}
            file.write(json.dumps(record) + "\n")


def csv_rows(run_dir: Path) -> list[dict[str, str]]:
    """The rows of a run's csv/metrics.csv, as the CSV logger wrote them."""
    with (run_dir / "csv" / "metrics.csv").open() as f:
        return list(csv.DictReader(f))
