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
    trainer = build.build_trainer(make_cfg())
    bar = trainer.progress_bar_callback
    assert isinstance(bar, RichProgressBar) is rich
    assert bar.is_enabled is rich  # under CI or a pipe: a disabled bar, so no tqdm either


def test_progress_bar_off_by_trainer_flag(make_cfg, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.delenv("CI", raising=False)
    trainer = build.build_trainer(make_cfg("trainer.enable_progress_bar=false"))
    assert trainer.progress_bar_callback is None


def test_the_console_names_the_overrides_and_prints_the_config_on_request(tmp_path, capfd):
    from litforge import training
    from tests.test_bad_input import run

    fast = ["trainer=cpu", "debug=fdr", "test=false"]
    code, out, err = run(training.main, fast, tmp_path / "quiet", capfd)
    assert code == 0, err[-2000:]
    assert f"overrides: {' '.join(fast)}" in out and f"{tmp_path}/quiet/config.yaml" in out
    assert "seed: 42" not in out + err  # the config is in the run directory, not the console
    assert "seed: 42" in (tmp_path / "quiet" / "config.yaml").read_text()
    code, out, err = run(training.main, [*fast, "print_config=true"], tmp_path / "full", capfd)
    assert code == 0, err[-2000:]
    assert "seed: 42" in out
