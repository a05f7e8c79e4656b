"""The model summary, drawn for where the output goes (conf/callbacks/model_summary.yaml)."""

from __future__ import annotations

from lightning.pytorch.callbacks import ModelSummary, RichModelSummary

from litforge import console


def model_summary(max_depth: int = 1) -> ModelSummary:
    """A rich table in a terminal a person watches; Lightning's plain-text table under CI,
    pipes and log files (box-drawing characters garble those)."""
    cls = RichModelSummary if console.interactive() else ModelSummary
    return cls(max_depth=max_depth)
