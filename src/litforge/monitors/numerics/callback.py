"""Numerics watch: the first non-finite loss or gradient, reported once, and what to do.

Per optimizer step the device computes one small row: the norm of each parameter's
gradient (`torch._foreach_norm`) and the loss. Each op is a few microseconds of CPU, many
more the first time in a step, so there are as few as can be. Nothing is read back per step
except where a decision must come before `optimizer.step()`:
- warn, and every policy under a GradScaler (16-mixed on CUDA): the row goes to the host
  without blocking (`HostRing`) and is looked at once it has arrived. The scaler itself
  skips a step whose gradients overflow (normal, not a fault), so nothing needs deciding
  before the step; stop waits for the previous step's row, which the scaler's own read of
  its inf flag in this step has already waited past.
- skip and stop without a scaler: one read per optimizer step, before it, to drop its
  gradients (torch optimizers leave parameters without a gradient alone). On the CPU,
  one flag from the GradScaler's non-finite check at scale 1 (one call for all gradients,
  where norms are a call each); the norms only on logging steps and for a report.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, NoReturn

import lightning as L
import torch

from litforge import console
from litforge.monitors.numerics.float8 import Float8Casts, float8_table, precision_label
from litforge.monitors.numerics.probes import (
    ActivationPeaks,
    HostRing,
    grad_norms,
    vanishing_eps,
)
from litforge.monitors.numerics.report import Fault, activation_table, block, what
from litforge.monitors.numerics.settings import POLICIES, NumericsSettings
from litforge.monitors.numerics.stop import NumericsFault, fail_if_weights_broken, stop
from litforge.tracking.step_metrics import is_logging_step, log_step_metrics

__all__ = ["POLICIES", "NumericsFault", "NumericsWatch"]


class NumericsWatch(L.Callback):
    """policy: warn (report, train on), skip (drop that optimizer step), or stop (skip it,
    save a checkpoint where a resume finds it, exit with NumericsFault).
    max_skipped_in_row, min_loss_scale: 16-mixed faults (a skipped step alone is not one).
    activations: record each module's largest activation and print a table at the end; in
    precision=fp8 also each float8 layer's amax, saturation and underflow (numerics.float8)."""

    def __init__(
        self,
        policy: str = NumericsSettings.policy,
        max_skipped_in_row: int = NumericsSettings.max_skipped_in_row,
        min_loss_scale: float = NumericsSettings.min_loss_scale,
        activations: bool = NumericsSettings.activations,
    ) -> None:
        settings = NumericsSettings.checked(  # a bad value: one line naming its key
            policy=policy,
            max_skipped_in_row=max_skipped_in_row,
            min_loss_scale=min_loss_scale,
            activations=activations,
        )
        self.policy = settings.policy
        self.max_skipped_in_row = settings.max_skipped_in_row
        self.min_loss_scale = float(settings.min_loss_scale)
        self.activations = settings.activations
        self._peaks: ActivationPeaks | None = None
        self._casts: Float8Casts | None = None

    # -- per step -----------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._named = [(n, p) for n, p in pl_module.named_parameters() if p.requires_grad]
        self._all_names = [n for n, _ in self._named]
        self._sharded = any(hasattr(p, "to_local") for _, p in self._named)  # FSDP's DTensors
        self._distributed = trainer.world_size > 1  # asked once, not per step
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self._scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self._decide_now = self.policy != "warn" and self._scaler is None
        cpu = trainer.strategy.root_device.type == "cpu"
        self._flag_only = self._decide_now and cpu
        self._flag, self._one = torch.zeros(1), torch.ones(1)
        self._ring = HostRing()
        self._losses: list[torch.Tensor] = []
        self._stepped = self._stop_pending = False
        self._values: list[float] | None = None  # this step's row, where it was read
        self._fault: Fault | None = None
        self._bad = self._steps = self._skipped = self._in_row = 0
        self._precision = precision_label(trainer, pl_module)  # fp8: + its float8 layers
        if self.activations:
            self._peaks = ActivationPeaks(pl_module)
            self._casts = Float8Casts.of(pl_module)
        for problem in vanishing_eps(trainer.optimizers) if trainer.is_global_zero else []:
            console.warn(
                f"numerics: {problem}, so the first update can make weights non-finite; raise "
                "it (precision.optimizer_eps=1e-4 for litforge's model configs)"
            )

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self._peaks is not None:
            self._peaks.step = float(trainer.global_step)
        if self._casts is not None:
            self._casts.step = float(trainer.global_step)

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        # Each micro-batch of an accumulated step; 16-mixed: the scaled loss (same finiteness).
        loss = loss.detach()
        self._losses.append(loss if loss.dim() == 0 else loss.sum())

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        # After the GradScaler's unscale_, before clipping (Lightning clips after this hook).
        grads = [param.grad for _, param in self._named]
        if any(g is None for g in grads):  # parameters this step did not reach
            kept = [(n, g) for (n, _), g in zip(self._named, grads, strict=True) if g is not None]
            self._names, grads = [n for n, _ in kept], [g for _, g in kept]
        else:
            self._names = self._all_names
        if not grads or not self._losses:
            return
        self._stepped = True
        self._steps += 1
        if self._flag_only:
            finite = self._all_finite(trainer, grads)
            if not finite or is_logging_step(trainer):
                self._row = self._row_of(grads)
                self._values = self._row.tolist()
            if not finite:
                self._skip(trainer, optimizer, self._values or [])
            return
        self._row = self._row_of(grads)
        if not self._decide_now:
            return
        if self._distributed:  # DDP's gradients agree across ranks; losses may not
            values = [trainer.strategy.reduce(self._row.sum(), reduce_op="sum").item()]
        else:
            values = self._row.tolist()  # the one read per optimizer step of skip and stop
            self._values = values
        if not all(map(math.isfinite, values)):
            self._skip(trainer, optimizer, values)

    def _row_of(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """[each gradient's norm..., each micro-batch's loss..., (the loss scale)]."""
        norms = grad_norms(grads, self._sharded)
        extra = [self._scaler._scale.view(())] if self._scaler is not None else []
        losses = [x if x.dtype == torch.float32 else x.float() for x in self._losses]
        return torch.stack([*norms, *losses, *extra])

    def _all_finite(self, trainer: L.Trainer, grads: list[torch.Tensor]) -> bool:
        """One check of every gradient and loss, and one read. Multiplying by 1 in place
        leaves every value as it was."""
        local = [g.to_local() for g in grads] if self._sharded else grads
        tensors = [*local, *self._losses]
        torch._amp_foreach_non_finite_check_and_unscale_(tensors, self._flag, self._one)
        flag = self._flag
        if self._distributed:  # DDP's gradients agree across ranks; losses may not
            flag = trainer.strategy.reduce(flag, reduce_op="max")
        found = bool(flag.item())
        if found:
            self._flag.zero_()
        return not found

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        if not self._stepped:  # accumulating: no optimizer step in this batch
            return
        self._stepped = False
        if self._stop_pending:
            self._stop(trainer)
        if not self._decide_now:
            self._ring.push(trainer.global_step - 1, self._row, self._names)
            # stop looks at the previous step's row, waiting for it if need be: it has arrived
            # (the GradScaler's read in this step waited past it); all ranks stop together.
            upto = trainer.global_step - 2 if self.policy == "stop" else None
            self._look(trainer, self._ring.take(upto))
        self._log(trainer, pl_module)
        self._losses.clear()
        self._values = None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._decide_now:  # the run is over: waiting for the last rows costs nothing
            self._look(trainer, self._ring.take(trainer.global_step - 1))
        if self._bad:
            console.warn(
                "numerics: %d of %d optimizer steps in this run had a fault (policy %s)",
                self._bad, self._steps, self.policy,
            )  # fmt: skip
        self._show_activations()
        fail_if_weights_broken(trainer, self.policy, self._fault.step if self._fault else None)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._peaks is not None:
            self._peaks.remove()
            self._peaks = None
        if self._casts is not None:
            self._casts.remove()
            self._casts = None

    # -- deciding -----------------------------------------------------------------------------
    def _skip(self, trainer: L.Trainer, optimizer: Any, values: list[float]) -> None:
        """Drop this step's update: parameters without a gradient are left as they are."""
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = None
        self._bad += 1
        if self.policy == "stop":
            self._stop_pending = True
        if self._fault is None:
            row = values if len(values) > 1 else self._row.tolist()
            self._fault = self._fault_of(trainer.global_step, self._names, row)
            if self.policy == "skip":
                self._report(trainer, "skipped this optimizer step (weights unchanged, the LR "
                             "schedule still advances one step); training goes on")  # fmt: skip
            else:
                self._report(trainer, "skipped this optimizer step; stopping")

    def _look(self, trainer: L.Trainer, rows: Any) -> None:
        """The rows that reached the host, in order: count, report the first fault, stop."""
        for step, names, row in rows:
            fault = self._fault_of(step, names, row)
            overflow = not all(map(math.isfinite, fault.grad_norms))
            if self._scaler is not None:  # it skipped such a step: normal, unless too many
                self._skipped += overflow
                self._in_row = self._in_row + 1 if overflow else 0
                fault = replace(fault, skipped=self._skipped, in_row=self._in_row)
            bad = what(fault, self.min_loss_scale, self.max_skipped_in_row) is not None
            if trainer.world_size > 1 and self.policy == "stop":  # all ranks stop together
                flag = torch.tensor(float(bad), device=trainer.strategy.root_device)
                bad = bool(trainer.strategy.reduce(flag, reduce_op="max") > 0)
            self._bad += bad
            if bad and self._fault is None:
                self._fault = fault
                if self.policy == "stop":
                    self._report(trainer, "stopping at the end of the step after it")
                    self._stop(trainer)
                if self._scaler is not None and overflow:
                    self._report(trainer, "the GradScaler skipped that step; training goes on")
                else:
                    self._report(trainer, "that step was applied; training goes on")

    def _fault_of(self, step: int, names: list[str], row: list[float]) -> Fault:
        """The host values of a row: [norms..., losses..., (scale)]."""
        scale = row.pop() if self._scaler is not None else None
        losses = row[len(names) :]
        return Fault(
            step=step,
            loss_finite=all(math.isfinite(x) for x in losses),
            grad_norms=row[: len(names)],
            names=names,
            scale=scale,
            skipped=self._skipped,
            in_row=self._in_row,
        )

    def _report(self, trainer: L.Trainer, outcome: str) -> None:
        assert self._fault is not None
        group = trainer.optimizers[0].param_groups[0] if trainer.optimizers else {}
        lr = group.get("initial_lr", group.get("lr"))
        text = block(self._fault, self._summary(), self._precision, self.policy, outcome,
                     lr, trainer.gradient_clip_val, self._peaks is not None)  # fmt: skip
        console.warn("%s", text)

    def _summary(self) -> str:
        assert self._fault is not None
        return what(self._fault, self.min_loss_scale, self.max_skipped_in_row) or "fault"

    def _stop(self, trainer: L.Trainer) -> NoReturn:
        assert self._fault is not None
        self._show_activations()
        stop(trainer, self._summary(), self._fault.step)

    # -- reporting ----------------------------------------------------------------------------
    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # On Lightning's logging steps only, straight to the loggers (a self.log call costs
        # ~0.2 ms); reads the row unless the per-step decision has read it already.
        if not is_logging_step(trainer):
            return
        if self._flag_only and self._values is None:  # the logging step began after the check
            return
        count = len(self._names)
        values = self._values if self._values is not None else self._row.tolist()
        metrics = {"numerics/grad_norm": math.sqrt(math.fsum(v * v for v in values[:count]))}
        if self._scaler is not None:  # the scale this step ran with; skipped steps as read
            metrics["numerics/loss_scale"] = values[-1]
            metrics["numerics/skipped_steps"] = float(self._skipped)
        log_step_metrics(trainer, metrics)

    def _show_activations(self) -> None:
        rows = self._peaks.read() if self._peaks is not None else []
        if rows:
            console.info("%s", activation_table(rows))
            self._peaks.clear()  # type: ignore[union-attr]
        casts = self._casts.read() if self._casts is not None else []
        if casts:
            console.info("%s", float8_table(casts))
            self._casts.clear()  # type: ignore[union-attr]
