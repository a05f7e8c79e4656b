"""Shrink the micro-batch on out-of-memory: `microbatch.auto=true`.

A `torch.OutOfMemoryError` in the forward, the backward (its hooks included) or the
optimizer step of one training step splits every batch from then on into `parts` pieces
run one after another (forward and backward each), so the micro-batch halves and the
accumulation doubles while the effective batch and the data order stay what they were:
the same samples, in the same order, summed into the same optimizer step. The step that
failed runs again: after a forward failure only its batch (the gradients so far are
complete), after a backward or optimizer-step failure the whole accumulation window, from
zeroed gradients. Below one sample per piece the error propagates, and `train` reports it
(the out-of-memory block). `parts` is saved in checkpoints: a resumed run does not fail
again first.

Lightning's own `BatchSizeFinder` searches before training and restarts nothing mid-fit,
and the loop has no hook to retry a step, so the callback wraps the strategy's
`training_step`, `backward` and `optimizer_step` of its trainer (Lightning calls them by
attribute) and, because Lightning zeroes gradients after the window's first
`training_step`, the module's `optimizer_zero_grad` when the pieces already did. One
process only: under DDP the other ranks would wait in the all-reduce of a step that one
rank re-runs.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.data import extract_batch_size
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning_utilities.core.apply_func import apply_to_collection

from litforge import console
from litforge.datamodule_facts import batch_size_of
from litforge.errors import ConfigError

WRAPPED = ("training_step", "backward", "optimizer_step")


def when_enabled(enabled: bool) -> AutoMicrobatch | None:
    """conf/callbacks/auto_microbatch.yaml's target: the callback under microbatch.auto=true,
    no callback otherwise."""
    return AutoMicrobatch() if enabled else None


class AutoMicrobatch(L.Callback):
    def __init__(self) -> None:
        self.parts = 1  # pieces each batch runs in
        self.batch_size: int | None = None  # the largest batch seen (the floor: one sample)
        self._window: list[tuple[tuple[Any, ...], dict[str, Any]]] = []  # this step's batches
        self._grads_zeroed = False  # the pieces of a window's first batch zeroed them
        self._original: dict[str, Callable[..., Any]] = {}
        self._trainer: L.Trainer | None = None

    # -- checks and set-up ------------------------------------------------------------------
    def check_before_fit(
        self, trainer: L.Trainer, datamodule: L.LightningDataModule | None
    ) -> None:
        """Before fit (litforge.build calls it once the Trainer is built; the hook
        litforge.hooks.ChecksBeforeFit): the refusals."""
        if trainer.world_size > 1:
            raise ConfigError(
                f"microbatch.auto=true runs in one process; this run has {trainer.world_size}"
                " (trainer.devices x trainer.num_nodes): under DDP or FSDP the other ranks would"
                " wait in the all-reduce of the step one rank re-runs. Set microbatch.auto=false"
                " and pick data.batch_size x trainer.accumulate_grad_batches (python -m"
                " litforge.budget says which fits)"
            )
        micro = batch_size_of(datamodule) if datamodule is not None else None
        if micro == 1:
            raise ConfigError(
                "microbatch.auto=true with data.batch_size=1: a micro-batch of one sample "
                "cannot shrink; set data.batch_size above 1 (with trainer.accumulate_grad_batches"
                " for the effective batch) or microbatch.auto=false"
            )

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or self._original:
            return
        if not pl_module.automatic_optimization:
            raise ConfigError(
                f"microbatch.auto=true needs automatic optimization; {type(pl_module).__name__}"
                " sets automatic_optimization=False (split its batches in its own training_step)"
            )
        self._trainer = trainer
        strategy = trainer.strategy
        for name in WRAPPED:
            if name in vars(strategy):
                raise ConfigError(
                    f"microbatch.auto=true: the strategy's {name} is already replaced on its "
                    "instance; set microbatch.auto=false"
                )
            self._original[name] = getattr(strategy, name)
        strategy.training_step = self._training_step  # type: ignore[method-assign]
        strategy.backward = self._backward  # type: ignore[method-assign]
        strategy.optimizer_step = self._optimizer_step  # type: ignore[method-assign]
        self._zero_grad = pl_module.optimizer_zero_grad
        pl_module.optimizer_zero_grad = self._optimizer_zero_grad  # type: ignore[method-assign]

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or not self._original:
            return
        for name in WRAPPED:
            delattr(trainer.strategy, name)  # the class's methods again
        del pl_module.optimizer_zero_grad
        self._original.clear()

    def state_dict(self) -> dict[str, Any]:
        return {"parts": self.parts, "batch_size": self.batch_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.parts = int(state.get("parts", 1))
        self.batch_size = state.get("batch_size")

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        try:
            size = extract_batch_size(batch)
        except MisconfigurationException:
            raise ConfigError(
                "microbatch.auto=true cannot split this DataModule's batches: it needs a tensor,"
                " or lists, tuples, dicts or dataclasses of tensors, whose first dimension is "
                f"the batch; got {type(batch).__name__}"
            ) from None
        self.batch_size = max(self.batch_size or 0, size)

    def on_train_epoch_start(self, *args: Any) -> None:
        self._window.clear()

    # -- the wrapped calls --------------------------------------------------------------------
    def _training_step(self, *args: Any, **kwargs: Any) -> Any:
        self._window.append((args, kwargs))
        if self.parts == 1:
            try:
                return self._original["training_step"](*args, **kwargs)
            except torch.OutOfMemoryError as err:
                if not self._shrink(err, "forward"):
                    raise
            _release()
        return self._run(self._window[-1:], first=len(self._window) == 1)

    def _backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if not loss.requires_grad:  # the pieces ran their own backward
            return loss
        try:
            return self._original["backward"](loss, *args, **kwargs)
        except torch.OutOfMemoryError as err:
            if not self._shrink(err, "backward"):
                raise
        # Frees the failed batch's graph, which Lightning's closure holds (a view's graph
        # cannot be cut in place: it goes with the step).
        with contextlib.suppress(RuntimeError):
            loss.detach_()
        _release()
        self._zero_all()
        self._run(self._window)
        return loss

    def _optimizer_step(self, optimizer: Any, closure: Callable[[], Any], *args: Any, **kw: Any):
        try:
            result = self._original["optimizer_step"](optimizer, closure, *args, **kw)
        except torch.OutOfMemoryError as err:
            if not self._shrink(err, "optimizer step"):
                raise
        else:
            self._window.clear()
            return result
        _release()
        self._zero_all()
        try:
            return self._original["optimizer_step"](
                optimizer, lambda: self._run(self._window), *args, **kw
            )
        finally:
            self._window.clear()

    def _optimizer_zero_grad(self, *args: Any, **kwargs: Any) -> None:
        if self._grads_zeroed:
            self._grads_zeroed = False
            return
        self._zero_grad(*args, **kwargs)

    # -- pieces -------------------------------------------------------------------------------
    def _run(self, entries: list[tuple[tuple[Any, ...], dict[str, Any]]], first: bool = False):
        """Forward and backward of `entries`' batches in pieces; another failure shrinks
        again and runs the whole window from zeroed gradients. `first`: the window's first
        batch, whose gradients Lightning zeroes after this `training_step` returns."""
        while True:
            try:
                if first:
                    self._zero_all()
                    self._grads_zeroed = True  # so Lightning's zeroing is skipped
                output = None
                for args, kwargs in entries:
                    output = self._pieces(args, kwargs)
                return output
            except torch.OutOfMemoryError as err:
                if not self._shrink(err, "forward or backward of a piece"):
                    raise
            _release()
            self._zero_all()
            entries = self._window

    def _pieces(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        batch, rest = args[0], args[1:]
        size = extract_batch_size(batch)
        trainer = self._trainer
        assert trainer is not None
        optimizer = trainer.optimizers[0]
        scale = trainer.accumulate_grad_batches
        total, output = None, None
        for piece, count in split(batch, size, self.parts):
            output = self._original["training_step"](piece, *rest, **kwargs)
            loss = output.get("loss") if isinstance(output, dict) else output
            if loss is None:
                continue
            self._original["backward"](loss * (count / size / scale), optimizer)
            share = loss.detach() * (count / size)
            total = share if total is None else total + share
        if isinstance(output, dict):
            return {**output, "loss": total}
        return total

    def _zero_all(self) -> None:
        trainer = self._trainer
        assert trainer is not None
        for optimizer in trainer.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def _shrink(self, err: BaseException, phase: str) -> bool:
        """More pieces per batch; False at one sample per piece (the error then stands)."""
        size = self.batch_size or 1
        more = next((n for n in range(self.parts + 1, size + 1)
                     if size % n == 0 and n % self.parts == 0), None)  # fmt: skip
        trainer = self._trainer
        if more is None or trainer is None:
            return False
        accumulate = trainer.accumulate_grad_batches
        console.warn(
            f"microbatch.auto: out of memory in the {phase} at optimizer step "
            f"{trainer.global_step} ({str(err).strip().splitlines()[0] if str(err) else ''}): "
            f"micro-batch {size // self.parts} -> {size // more}, accumulation "
            f"{accumulate * self.parts} -> {accumulate * more}, the effective batch and the data"
            f" order stay; the step runs again. Next time start with data.batch_size="
            f"{size // more} trainer.accumulate_grad_batches={accumulate * more}"
        )
        self.parts = more
        return True


def split(batch: Any, size: int, parts: int) -> list[tuple[Any, int]]:
    """`batch` in up to `parts` consecutive pieces along the first dimension of its
    tensors of `size` rows (others are shared), each with its number of samples."""
    bounds = [round(i * size / parts) for i in range(parts + 1)]
    pieces = []
    for start, stop in zip(bounds, bounds[1:], strict=False):
        if stop == start:
            continue

        def cut(tensor: torch.Tensor, start: int = start, stop: int = stop) -> torch.Tensor:
            if tensor.dim() == 0 or tensor.size(0) != size:
                return tensor
            return tensor[start:stop]

        pieces.append((apply_to_collection(batch, torch.Tensor, cut), stop - start))
    return pieces


def _release() -> None:
    """Frees what the failed attempt left (its frames are gone with the exception)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
