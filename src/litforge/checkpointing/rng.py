"""Every rank's RNG states in the checkpoint, restored once the dataloader iterator exists.

Restoring in `on_load_checkpoint` is too early: Lightning builds the train iterator after
it, and building it draws a seed from the global torch RNG, so the resumed run would
diverge. States are stored as tensors so the file loads with weights_only=True and
pickles fast: numpy's and Python's 624-word Mersenne Twister states as lists of ints were
most of the objects a small model's checkpoint pickled (older checkpoints hold lists;
both load).
"""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.distributed as dist

from litforge.errors import ConfigError


def capture() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, py_state, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": [version, torch.tensor(py_state, dtype=torch.int64), gauss_next],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(_ints(keys), dtype=np.uint32), pos, has_gauss, cached))
    version, py_state, gauss_next = state["python"]
    random.setstate((version, tuple(_ints(py_state)), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class RngState(L.Callback):
    def __init__(self) -> None:
        self._to_restore: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        # Called on every rank while the checkpoint is assembled; rank 0 writes the file.
        mine = capture()
        if not (dist.is_available() and dist.is_initialized()):
            return {"per_rank": [mine]}
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        return {"per_rank": everyone}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        per_rank = state_dict.get("per_rank", []) if isinstance(state_dict, dict) else None
        if not isinstance(per_rank, list):
            raise _not_ours(f"per_rank is a {type(per_rank).__name__}, not a list")
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        # A different world size cannot continue the same random streams; start new ones.
        self._to_restore = per_rank[rank] if len(per_rank) == _world_size() else None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._to_restore is not None:
            try:
                restore(self._to_restore)
            except (
                KeyError,
                TypeError,
                ValueError,
                RuntimeError,
                IndexError,
                OverflowError,
            ) as err:
                raise _not_ours(f"{type(err).__name__}: {str(err).strip()[:200]}") from None
            self._to_restore = None


def _not_ours(why: str) -> ConfigError:
    # A checkpoint's bytes are checked, but anyone can write a well-formed one.
    why = " ".join(why.split())
    return ConfigError(
        f"the checkpoint's RNG states are not ones litforge writes ({why}); resume from an "
        "intact checkpoint, or resume=never"
    )


def _ints(words: torch.Tensor | list[int]) -> list[int]:
    return words.tolist() if isinstance(words, torch.Tensor) else list(words)


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
