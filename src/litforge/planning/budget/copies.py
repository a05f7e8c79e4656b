"""Copies of a module for the memory budget to measure: rebuilt from its config, in a
precision as Lightning's plugin converts it, and the bytes autograd saves while one runs."""

from __future__ import annotations

import copy
import inspect
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import HalfPrecision, MixedPrecision, Precision

from litforge.errors import LitforgeError
from litforge.precision import normalize

_NOT_KEPT = "not kept: measured by litforge's memory budget"

# Rows of `--compare`, in this order; each device keeps those it can run.
ORDER = ("32", "bf16-mixed", "16-mixed", "bf16-true", "16-true")


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
    the storages of `exclude` (parameters, buffers: they exist anyway) are not counted.

    Nothing is kept for backward: each saved tensor is counted and let go, so the step
    needs only its working memory, not its activations (and cannot run backward). A
    storage is known again by its Python object, which lives exactly as long as it does.
    """
    skip = {id(t.untyped_storage()) for t in exclude}
    seen: dict[int, weakref.ref] = {}
    total = 0

    def pack(t: torch.Tensor) -> str:
        nonlocal total
        storage = t.untyped_storage()
        known = seen.get(id(storage))
        if id(storage) not in skip and (known is None or known() is not storage):
            seen[id(storage)] = weakref.ref(storage)
            total += storage.nbytes()
        return _NOT_KEPT

    def unpack(_: str) -> torch.Tensor:
        raise RuntimeError("the memory budget's measuring step keeps nothing for backward")

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        step()
    return total


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

        # As the run built it: nested values as Hydra delivers them, `_convert_` honoured.
        return _frozen_like(instantiate({**config, **changes}), module)
    params = inspect.signature(type(module).__init__).parameters
    anything = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in {**module.hparams, **changes}.items() if anything or k in params}
    try:
        return _frozen_like(type(module)(**kwargs), module)
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


def _frozen_like(copy: L.LightningModule, module: L.LightningModule) -> L.LightningModule:
    """`copy` with the parameters `module` has frozen (`model.freeze`) frozen too: they
    take no gradient and no optimizer state."""
    frozen = {name for name, p in module.named_parameters() if not p.requires_grad}
    for name, param in copy.named_parameters():
        if name in frozen:
            param.requires_grad_(False)
    return copy
