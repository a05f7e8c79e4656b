"""The memory budget's measurements: weights, gradients, optimizer state, activations.

Weights, gradients and optimizer state are exact: the module is rebuilt uninitialised (on
the meta device, no memory, when it is large), converted by Lightning's precision plugin,
and its own `configure_optimizers` optimizer takes one step, so its state tensors are the
ones training would create.
Activations are measured (`litforge.planning.budget.activations`): the bytes autograd saves
for backward in one `training_step`, whole for a small module, by depth for a large one,
with attention counted as CUDA's fused kernels save it when the question is about a GPU
(`litforge.planning.budget.attention`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.init import _EmptyInit
from lightning.pytorch.core.optimizer import _configure_optimizers
from torch.utils._pytree import tree_leaves
from torch.utils.data import default_collate

from litforge.errors import LitforgeError
from litforge.hf.quantize import PLANNED_BYTES
from litforge.planning.budget import activations, depth
from litforge.planning.budget.activations import Activations
from litforge.planning.budget.copies import (
    ORDER,
    effective,
    has_checkpointing,
    precision_plugin,
    precisions_for,
    rebuild,
    saved_bytes,
)

__all__ = [
    "ORDER", "Row", "States", "Subject", "effective", "precision_plugin", "precisions_for",
    "rebuild", "saved_bytes", "state_bytes",
]  # fmt: skip

SMALL_MODULE_BYTES = 64 * 2**20  # larger modules are measured on meta copies, by depth


@contextmanager
def _attached_to_a_trainer(module: L.LightningModule) -> Iterator[None]:
    """The module attached to a CPU Trainer whose strategy holds it (`self.trainer`,
    `self.trainer.model`), for the call; a module that has a Trainer keeps its own."""
    if module._trainer is not None:  # noqa: SLF001 - Lightning's own attribute
        yield
        return
    said = logging.getLogger("lightning.pytorch")  # its "GPU available" lines: not this run's
    level = said.level
    said.setLevel(logging.WARNING)
    try:
        trainer = L.Trainer(
            accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False,
        )  # fmt: skip
    finally:
        said.setLevel(level)
    trainer.strategy.connect(module)
    module.trainer = trainer
    try:
        yield
    finally:
        module.trainer = None  # type: ignore[assignment]


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


@dataclass(frozen=True)
class States:
    """Bytes of the module's parameters, their gradients and its optimizers' state."""

    weights: int
    gradients: int
    optimizer: int
    optimizers: tuple[str, ...]  # class names, e.g. ("AdamW",)


def state_bytes(
    module: L.LightningModule,
    precision: str,
    device: torch.device,
    config: dict[str, Any] | None = None,
) -> States:
    """From the real tensors: an uninitialised copy in the precision's dtype takes one step
    of the optimizers its own `configure_optimizers` returns. The copy is on the meta
    device (no memory) unless the module is small, where a CPU step is faster."""
    small = sum(p.nbytes for p in module.parameters()) <= SMALL_MODULE_BYTES
    with torch.device("cpu" if small else "meta"), _EmptyInit():
        copy = precision_plugin(precision, device).convert_module(rebuild(module, config))
    params = list(copy.parameters())
    trainable = [p for p in params if p.requires_grad]
    for p in trainable:
        p.grad = torch.zeros_like(p)
    optimizers = _optimizers_of(copy, trainable, config)
    state = 0
    for optimizer in optimizers:
        optimizer.step()
        tensors = tree_leaves([dict(s) for s in optimizer.state.values()])
        state += sum(t.nbytes for t in tensors if isinstance(t, torch.Tensor))
    return States(
        sum(_weight_bytes(p) for p in params),
        sum(p.nbytes for p in trainable),
        state,
        tuple(type(o).__name__ for o in optimizers),
    )


def _weight_bytes(param: torch.nn.Parameter) -> int:
    """Its bytes, or those a model marks it as taking in training (4-bit QLoRA weights,
    built unquantized on the meta device: `litforge.hf.quantize.plan_4bit`)."""
    per_element = getattr(param, PLANNED_BYTES, None)
    return param.nbytes if per_element is None else int(param.numel() * per_element)


def _optimizers_of(
    module: L.LightningModule, params: list[torch.nn.Parameter], config: dict[str, Any] | None
) -> list[torch.optim.Optimizer]:
    """The optimizers the module's `configure_optimizers` returns, called with a Trainer
    attached as Lightning calls it (lightning-hydra-template's
    `self.trainer.model.parameters()`); where it still fails, the config's `optimizer`
    partial built on the parameters."""
    try:
        try:
            return _configure_optimizers(module.configure_optimizers())[0]
        except Exception:  # noqa: BLE001 - it may need its Trainer: call it as Lightning does
            with _attached_to_a_trainer(module):
                return _configure_optimizers(module.configure_optimizers())[0]
    except Exception as err:  # noqa: BLE001 - any user code outside a fit
        node = (config or {}).get("optimizer")
        if not (isinstance(node, dict) and node.get("_partial_")):
            raise LitforgeError(
                f"{type(module).__name__}.configure_optimizers() fails before a fit starts "
                f"({type(err).__name__}: {_first_line(err)}), and model.optimizer is no "
                "_partial_ to build instead: read the trainer's settings there in "
                "setup()/on_fit_start(), or give model.optimizer as a _partial_ target"
            ) from err
        from hydra.utils import instantiate

        return [instantiate(node)(params=params)]


@dataclass(frozen=True)
class Row:
    """One setting's estimate; `checkpointing` is None for a model without the option."""

    precision: str
    effective: str
    checkpointing: bool | None
    batch_size: int
    weights: int
    gradients: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations


@dataclass
class Subject:
    """The configured module and training samples, measured on `device`.

    `module` is only read (hyperparameters, state dict; a large one may be on the meta
    device): every measurement runs on a rebuilt copy inside `torch.random.fork_rng`, so a
    training run's RNG and weights are left as they were.
    """

    module: L.LightningModule
    samples: Sequence[Any]  # training samples (dataset items), collated as the loader does
    batch_size: int
    accumulate: int
    device: torch.device
    # trainer=fsdp: processes the weights, gradients and optimizer state are sharded over
    shards: int = 1
    config: dict[str, Any] | None = None  # the `model` group the module was built from
    # "fused": attention counted as CUDA's fused kernels save it; "measured": as it runs here
    attention: str = "measured"
    by_depth: bool | None = None  # None: by depth when the module is large
    _activations: dict[tuple[str, bool | None], Activations] = field(default_factory=dict)
    _states: dict[str, States] = field(default_factory=dict)

    @property
    def checkpointing(self) -> bool | None:
        if not has_checkpointing(self.module):
            return None
        return bool(self.module.hparams.get("gradient_checkpointing", False))

    def sample_shape(self) -> tuple[int, ...]:
        """The shape of one sample's first tensor (e.g. its token window or image)."""
        first = next((t for t in tree_leaves(self.samples[0]) if isinstance(t, torch.Tensor)), None)
        return () if first is None else tuple(first.shape)

    def batch(self, n: int) -> Any:
        if len(self.samples) < n:
            raise LitforgeError(
                f"the memory budget needs {n} training samples; the data has {len(self.samples)}"
            )
        return default_collate([self.samples[i] for i in range(n)])

    def activation_bytes(
        self, precision: str, checkpointing: bool | None, *sizes: int
    ) -> list[int]:
        """Saved-for-backward bytes of one training_step of the whole module on each
        number of samples."""
        runs = [(None, n) for n in sizes]
        return activations.measure_copies(self, precision, checkpointing, runs)[0]

    @property
    def measured_by_depth(self) -> bool:
        """A large module (or one on the meta device) with its repeated blocks in one
        container is measured by depth; `by_depth` True/False decides instead."""
        if self.by_depth is not None:
            return self.by_depth and depth.find_blocks(self.module) is not None
        large = depth.parameter_bytes(self.module) > SMALL_MODULE_BYTES
        meta = any(p.is_meta for p in self.module.parameters())
        return (large or meta) and depth.find_blocks(self.module) is not None

    def activation_model(self, precision: str, checkpointing: bool | None) -> Activations:
        """The setting's activations, linear in the micro-batch (measured once)."""
        key = (effective(precision, self.device), checkpointing)
        if key not in self._activations:
            how = activations.by_depth if self.measured_by_depth else activations.whole
            self._activations[key] = how(self, precision, checkpointing)
        return self._activations[key]

    def activations(self, precision: str, checkpointing: bool | None, batch_size: int) -> int:
        """Activation bytes at `batch_size`: measured at 1 and 2 samples, linear beyond
        (a fixed part such as position embeddings, plus the same amount per sample)."""
        return self.activation_model(precision, checkpointing).at(batch_size)

    def states(self, precision: str) -> States:
        """Mixed precision keeps float32 weights, gradients and state; true half halves them."""
        kind = (
            "half" if effective(precision, self.device) in ("bf16-true", "16-true") else "float32"
        )
        if kind not in self._states:
            with torch.random.fork_rng(self._rng_devices()):
                self._states[kind] = state_bytes(self.module, precision, self.device, self.config)
        return self._states[kind]

    def row(
        self, precision: str, checkpointing: bool | None = None, batch_size: int | None = None
    ) -> Row:
        states, size = self.states(precision), batch_size or self.batch_size
        return Row(
            precision,
            effective(precision, self.device),
            checkpointing,
            size,
            -(-states.weights // self.shards),  # FSDP: each process holds 1/shards of each
            -(-states.gradients // self.shards),
            -(-states.optimizer // self.shards),
            self.activations(precision, checkpointing, size),
        )

    def _rng_devices(self) -> list[torch.device]:
        return [self.device] if self.device.type == "cuda" else []
