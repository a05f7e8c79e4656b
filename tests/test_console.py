"""Rich output only for a person at a terminal; plain lines under CI and pipes."""

from __future__ import annotations

import sys

import pytest
from lightning.pytorch.callbacks import RichProgressBar

from litforge import build, console
from litforge.callbacks.epoch_log import EpochLog


@pytest.mark.parametrize(
    ("tty", "ci", "rich"), [(True, None, True), (True, "true", False), (False, None, False)]
)
def test_progress_bar_only_in_an_interactive_terminal(make_cfg, monkeypatch, tty, ci, rich):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert console.interactive() is rich
    callbacks = build.build_callbacks(make_cfg())
    assert any(isinstance(c, RichProgressBar) for c in callbacks) is rich
    assert any(isinstance(c, EpochLog) for c in callbacks)  # plain epoch lines always
    trainer = build.build_trainer(make_cfg(), [], [])
    assert (trainer.progress_bar_callback is not None) is rich
