"""What every CPU benchmark shares: one thread, quiet logs, a scratch directory per run.

Configs are composed with `litforge.cli.compose`, as the tests do: the config
`python train.py *overrides` would see.
"""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from pathlib import Path

import torch

from litforge.exits import silence_known_upstream_warnings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def setup() -> None:
    """One torch thread, plain (non-interactive) output as under CI, quiet Lightning."""
    os.environ["CI"] = "1"  # litforge: no progress bar, no rich tree (console.interactive)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    silence_known_upstream_warnings()
    # The template warns about things a benchmark does on purpose (few steps, no val
    # metric yet for the checkpoint monitor); their text is not what is measured.
    warnings.filterwarnings("ignore", category=UserWarning)
    import lightning  # noqa: F401  (configures its loggers on import; quiet them after)

    for name in ("lightning.pytorch", "lightning.fabric", "litforge"):
        logging.getLogger(name).setLevel(logging.ERROR)


def scratch_dir() -> Path:
    """A fresh directory for one run's checkpoints and logs (removed by the caller)."""
    return Path(tempfile.mkdtemp(prefix="litforge-bench-"))
