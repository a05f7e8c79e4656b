"""Checkpoints on any fsspec store that survive preemption and resume exactly.

The recipes see only `setup(cfg) -> Checkpointing` (callbacks, `resume_from`, `finish()`)
and `load_weights` (eval.py); the modules behind them each hold one concern:

configure.py       conf/checkpoint -> Checkpointing (a do-nothing one for checkpoint=none)
start.py           where a run starts: a pure decision over the config and the store's listing
session.py         Checkpointing: the callbacks, the resume point, finish() after fit
store.py           URL -> filesystem, start-up access check, completeness markers
uploader.py        local staging, retried (optionally background) uploads
callback.py        when to save, what to keep
resume.py          which checkpoint a restarted run continues from
checkpoint_file.py reading one checkpoint safely (local or URL), matching it to the model
rng.py             per-rank RNG states, restored after the dataloader iterator exists
preemption.py      SIGTERM / SIGUSR1 -> checkpoint at the next step, then exit
"""

from __future__ import annotations

from typing import Any

__all__ = ["Best", "Checkpointing", "load_weights", "setup"]


def __getattr__(name: str) -> Any:
    # Imported on first use: importing a light module of this package (the run lock, which
    # a plain Hydra app's Optuna sweep uses) must not import Lightning (~8 s of start-up).
    if name == "load_weights":
        from litforge.checkpointing.checkpoint_file import load_weights

        return load_weights
    # No submodule is named `setup`: importing it would bind the package's `setup` to the
    # module instead of the function.
    if name in ("Best", "Checkpointing", "setup"):
        from litforge.checkpointing import configure

        return getattr(configure, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
