"""Checkpoints on any fsspec store that survive preemption and resume exactly.

The recipes see only `setup(cfg) -> Checkpointing` (callbacks, `resume_from`, `finish()`)
and `load_weights` (eval.py); the modules behind them each hold one concern:

setup.py           conf/checkpoint -> Checkpointing (a do-nothing one for checkpoint=none)
store.py           URL -> filesystem, start-up access check, completeness markers
uploader.py        local staging, retried (optionally background) uploads
callback.py        when to save, what to keep
resume.py          which checkpoint a restarted run continues from
checkpoint_file.py reading one checkpoint safely (local or URL), matching it to the model
rng.py             per-rank RNG states, restored after the dataloader iterator exists
preemption.py      SIGTERM / SIGUSR1 -> checkpoint at the next step, then exit
"""

from litforge.checkpointing.checkpoint_file import load_weights
from litforge.checkpointing.setup import Best, Checkpointing, setup

__all__ = ["Best", "Checkpointing", "load_weights", "setup"]
