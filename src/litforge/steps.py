"""The steps a training recipe is made of: what `litforge.training.train` calls, and all a
project's own copy of it (`litforge recipe copy`) needs to name. Public: these names stay
(docs/architecture.md, "Public API"); what they call may change between versions."""

from __future__ import annotations

from litforge.build import build_datamodule, build_module, build_trainer
from litforge.checkpointing.configure import setup as setup_checkpoints
from litforge.console import interactive, show_config
from litforge.run_record import final_metrics, floats, write_metrics, write_start
from litforge.tracking.lifecycle import RunFacts, log_end
from litforge.validation.checks import check_config

__all__ = [
    "RunFacts",
    "build_datamodule",
    "build_module",
    "build_trainer",
    "check_config",
    "final_metrics",
    "floats",
    "interactive",
    "log_end",
    "setup_checkpoints",
    "show_config",
    "write_metrics",
    "write_start",
]
