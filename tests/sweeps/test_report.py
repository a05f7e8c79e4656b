"""A sweep's report never fails the sweep: the plots are drawn whatever the project did to
matplotlib, and a plot that cannot be drawn is one warning beside a written table."""

from __future__ import annotations

import logging

import matplotlib
import optuna
import pytest

from litforge.sweeps import report


def finished_study() -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    for value, lr in ((0.5, 0.1), (0.25, 0.01), (0.75, 0.001)):
        study.enqueue_trial({"lr": lr})
        trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1.0)})
        study.tell(trial, value)
    return study


@pytest.fixture
def usetex():
    """What a project's module did at import: LaTeX for every label (none installed here)."""
    with matplotlib.rc_context({"text.usetex": True}):
        yield


def test_a_projects_usetex_does_not_stop_the_plots(tmp_path, usetex):
    best = report.write(finished_study(), tmp_path, ["val/loss"])
    assert best[0].value == 0.25
    assert (tmp_path / "optimization_history.png").stat().st_size > 0
    assert "0.25" in (tmp_path / "best.yaml").read_text()


def test_a_plot_that_cannot_be_drawn_is_one_warning(tmp_path, caplog):
    (tmp_path / "optimization_history.png").mkdir()  # savefig cannot write there
    with caplog.at_level(logging.WARNING, logger="litforge"):
        best = report.write(finished_study(), tmp_path, ["val/loss"])
    assert best[0].value == 0.25
    assert len((tmp_path / "trials.csv").read_text().splitlines()) == 4
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "the plots could not be drawn" in warned[0], warned
    assert "\n" not in warned[0]
