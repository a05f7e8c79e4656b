"""The memory budget's measurements: weights, gradients, optimizer state, activations.

Weights, gradients and optimizer state are exact: the module is rebuilt uninitialised (on
the meta device, no memory, when it is large), converted by Lightning's precision plugin,
and its own `configure_optimizers` optimizer takes one step, so its state tensors are the
ones training would create.
Activations are measured: the bytes autograd saves for backward in one `training_step` of
the module (parameters excluded), under the plugin's `train_step_context` as Lightning runs
it, at 1 and 2 samples and scaled linearly to the micro-batch.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.init import _EmptyInit
from lightning.pytorch.core.optimizer import _configure_optimizers
from lightning.pytorch.plugins.precision import HalfPrecision, MixedPrecision, Precision
from lightning_utilities.core.apply_func import apply_to_collection
from torch.utils._pytree import tree_leaves
from torch.utils.data import default_collate

from litforge.errors import LitforgeError
from litforge.precision import normalize

# Rows of `--compare`, in this order; each device keeps those it can run.
ORDER = ("32", "bf16-mixed", "16-mixed", "bf16-true", "16-true")
SMALL_MODULE_BYTES = 64 * 2**20  # state_bytes steps a CPU copy up to this size, else meta
_NO_LOG_WARNING = r".*self\.log\(\)` but the `self\.trainer` reference is not registered.*"


def precisions_for(device: torch.device) -> tuple[str, ...]:
    """Precisions the device runs: CPU has no float16 autocast; CUDA needs bf16 support."""
    if device.type != "cuda":
        return ("32", "bf16-mixed", "bf16-true")
    bf16 = torch.cuda.is_bf16_supported()
    return tuple(p for p in ORDER if bf16 or "bf16" not in p)


def effective(precision: str, device: torch.device) -> str:
    """What Lightning runs: on CPU it swaps 16-mixed for bf16-mixed."""
    name = normalize(precision)
    return "bf16-mixed" if name == "16-mixed" and device.type == "cpu" else name


def precision_plugin(precision: str, device: torch.device) -> Precision:
    """The plugin `Trainer(precision=...)` builds for this device (tests compare them)."""
    name = effective(precision, device)
    if name.endswith("-mixed"):
        return MixedPrecision(name, device.type)  # type: ignore[arg-type]
    if name in ("bf16-true", "16-true"):
        return HalfPrecision(name)  # type: ignore[arg-type]
    return Precision()


def saved_bytes(step: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes autograd saves for backward while `step()` runs, each storage counted once;
    the storages of `exclude` (parameters, buffers: they exist anyway) are not counted."""
    skip = {(t.device, t.untyped_storage().data_ptr()) for t in exclude}
    storages: dict[tuple[torch.device, int], int] = {}
    kept: list[torch.Tensor] = []  # alive until counted, so no address is reused meanwhile

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = (t.device, storage.data_ptr())
        if key not in skip:
            storages[key] = storage.nbytes()
            kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = step()
    del out
    kept.clear()
    return sum(storages.values())


def has_checkpointing(module: L.LightningModule) -> bool:
    return "gradient_checkpointing" in inspect.signature(type(module).__init__).parameters


def rebuild(
    module: L.LightningModule, config: dict[str, Any] | None = None, **changes: Any
) -> L.LightningModule:
    """A fresh module of the same kind, with `changes` to its top-level arguments: built
    from its `config` (the `model` group) when given, else from its saved hyperparameters
    (as `load_from_checkpoint` does, keeping those the constructor takes), else a copy of
    `module` itself (when `changes` change nothing). RNG: the caller forks it."""
    if config is not None:
        from hydra.utils import instantiate

        return instantiate({**config, **changes}, _convert_="all")
    params = inspect.signature(type(module).__init__).parameters
    anything = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in {**module.hparams, **changes}.items() if anything or k in params}
    try:
        return type(module)(**kwargs)
    except TypeError as err:
        if any(module.hparams.get(k) != v for k, v in changes.items()):
            raise LitforgeError(
                f"the memory budget rebuilds {type(module).__name__} with {changes} and could "
                f"not ({err}); build it from the model config (train.py does)"
            ) from err
    trainer, module._trainer = module._trainer, None  # a copy, not of the whole Trainer
    try:
        return copy.deepcopy(module)
    finally:
        module._trainer = trainer


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
        sum(p.nbytes for p in params),
        sum(p.nbytes for p in trainable),
        state,
        tuple(type(o).__name__ for o in optimizers),
    )


def _optimizers_of(
    module: L.LightningModule, params: list[torch.nn.Parameter], config: dict[str, Any] | None
) -> list[torch.optim.Optimizer]:
    """The optimizers the module's `configure_optimizers` returns; for one that needs its
    Trainer (lightning-hydra-template's `self.trainer.model.parameters()`), the config's
    `optimizer` partial built on the parameters."""
    try:
        return _configure_optimizers(module.configure_optimizers())[0]
    except Exception as err:  # noqa: BLE001 - any user code outside a Trainer
        node = (config or {}).get("optimizer")
        if not (isinstance(node, dict) and node.get("_partial_")):
            raise LitforgeError(
                f"{type(module).__name__}.configure_optimizers() fails outside a Trainer "
                f"({type(err).__name__}: {err}) and model.optimizer is no _partial_ to build"
            ) from err
        from hydra.utils import instantiate

        return [instantiate(node, _convert_="all")(params=params)]


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

    `module` is only read (hyperparameters, state dict): every measurement runs on a
    rebuilt copy inside `torch.random.fork_rng`, so a training run's RNG and weights are
    left as they were.
    """

    module: L.LightningModule
    samples: Sequence[Any]  # training samples (dataset items), collated as the loader does
    batch_size: int
    accumulate: int
    device: torch.device
    # trainer=fsdp: processes the weights, gradients and optimizer state are sharded over
    shards: int = 1
    config: dict[str, Any] | None = None  # the `model` group the module was built from
    _activations: dict[tuple[str, bool | None], tuple[int, int]] = field(default_factory=dict)
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
        """Saved-for-backward bytes of one training_step on each number of samples."""
        plugin = precision_plugin(precision, self.device)
        changes = {} if checkpointing is None else {"gradient_checkpointing": checkpointing}
        with torch.random.fork_rng(self._rng_devices()):
            with _EmptyInit():  # the weights come from the module: no random init
                copy = rebuild(self.module, self.config, **changes)
            copy.load_state_dict(self.module.state_dict())
            copy = plugin.convert_module(copy).to(self.device).train()
            kept = [*copy.parameters(), *copy.buffers()]
            found = []
            for n in sizes:
                batch = plugin.convert_input(self.batch(n))
                batch = apply_to_collection(batch, torch.Tensor, lambda t: t.to(self.device))
                with plugin.train_step_context(), warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=_NO_LOG_WARNING)
                    found.append(saved_bytes(partial(copy.training_step, batch, 0), kept))
            return found

    def activations(self, precision: str, checkpointing: bool | None, batch_size: int) -> int:
        """Activation bytes at `batch_size`: measured at 1 and 2 samples, linear beyond
        (a fixed part such as position embeddings, plus the same amount per sample)."""
        key = (effective(precision, self.device), checkpointing)
        if key not in self._activations:
            one, two = self.activation_bytes(precision, checkpointing, 1, 2)
            self._activations[key] = (one, two)
        one, two = self._activations[key]
        return one + (batch_size - 1) * (two - one)

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
