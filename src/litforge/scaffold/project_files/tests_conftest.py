"""Fixtures: `make_cfg(*overrides)` is the config `python train.py *overrides` composes."""

from __future__ import annotations

from pathlib import Path

import pytest

from litforge import compose

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def make_cfg(tmp_path):
    def make(*overrides: str, config_name: str = "train"):
        return compose(list(overrides), tmp_path / "run", config_name, conf_dir=ROOT / "conf")

    return make
