"""litforge: a PyTorch Lightning + Hydra library for training on rented or shared GPUs.

The public API (docs/architecture.md, "Public API") is what `__all__` lists (importable as
`from litforge import NAME`, or as `_target_: litforge.NAME`), what `litforge.hf.__all__`
lists, the `_target_` paths of litforge's own configs (pkg://litforge.conf), the
`${litforge.NAME:...}` resolvers, and the `litforge` command with its `python -m` forms.
Everything else may change between versions. Names load on first use, so `import
litforge` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it
_PUBLIC = {
    # recipes and entry points
    "train": "litforge.training",
    "evaluate": "litforge.evaluation",
    "entry_point": "litforge.cli",
    "compose": "litforge.cli",
    # what a user's model and data build on
    "LitforgeModule": "litforge.models.base",
    "OptimizerFactory": "litforge.models.base",
    "SchedulerFactory": "litforge.models.base",
    "SplitDataModule": "litforge.data.loaders",
    "LoaderArgs": "litforge.data.loaders",
    "train_loader": "litforge.data.loaders",
    "eval_loader": "litforge.data.loaders",
    "at_least": "litforge.data.loaders",
    "adamw": "litforge.optim",
    "warmup_cosine": "litforge.optim",
    "batch_size_of": "litforge.datamodule_facts",
    "TokenWindows": "litforge.data.windows",
    "StreamDataModule": "litforge.data.shards.datamodule",
    "StreamArgs": "litforge.data.shards.datamodule",
    "ShardedDataset": "litforge.data.shards.reader",
    "write_shards": "litforge.data.shards.writer",
    # the precision A/B experiment's callbacks (conf/experiment/precision_ab.yaml)
    "PrecisionProbe": "litforge.precision_checks.training_ab.probe",
    "PrecisionReport": "litforge.precision_checks.training_ab.experiment",
    # errors a user's code may raise or catch
    "LitforgeError": "litforge.errors",
    "ConfigError": "litforge.errors",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'litforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
