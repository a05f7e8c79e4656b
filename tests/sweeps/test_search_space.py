"""Hydra's sweep syntax becomes Optuna distributions; mistakes name the key at fault."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from litforge.errors import ConfigError
from litforge.sweeps.search_space import override_value, parse


def test_each_form_maps_to_its_distribution(make_cfg):
    params = {
        "model.optimizer.lr": "tag(log, interval(1e-4, 1e-1))",
        "model.optimizer.eps": "interval(1e-8, 1e-6)",
        "model.net.hidden": "int(interval(32, 256))",
        "data.batch_size": "choice(32, 64)",
        "trainer.max_epochs": "range(1, 7, 2)",
        "model": "choice(cnn, gpt)",
    }
    space = parse(params, ["seed=1", "+extra=1,2"], make_cfg())
    d = space.distributions
    assert d["model.optimizer.lr"] == FloatDistribution(1e-4, 1e-1, log=True)
    assert d["model.optimizer.eps"] == FloatDistribution(1e-8, 1e-6)
    assert d["model.net.hidden"] == IntDistribution(32, 256)
    assert d["data.batch_size"] == CategoricalDistribution([32, 64])
    assert d["trainer.max_epochs"] == IntDistribution(1, 5, step=2)
    assert d["model"] == CategoricalDistribution(["cnn", "gpt"])
    assert d["extra"] == CategoricalDistribution([1, 2])
    assert space.fixed == ["seed=1"]
    overrides = space.overrides({"model.optimizer.lr": 0.001, "extra": 2, "model": "gpt"})
    assert overrides == ["seed=1", "model.optimizer.lr=0.001", "+extra=2", "model='gpt'"]
    grid = parse(
        {"trainer.max_epochs": "range(1, 7, 2)", "model": "choice(cnn, gpt)"}, [], make_cfg()
    )
    assert grid.grid() == {"trainer.max_epochs": [1, 3, 5], "model": ["cnn", "gpt"]}


def test_values_read_back_as_they_were_sampled():
    assert [override_value(v) for v in (None, True, 3, 1e-05, "it's")] == [
        "null", "true", "3", "1e-05", "'it\\'s'"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("params", "arguments", "message"),
    [
        ({"model.optimizer.lrr": "interval(0.1, 1)"}, [], "model.optimizer.lrr is not a key"),
        (
            {"model.optimizer.lr": "interval(1)"},
            [],
            "hydra.sweeper.params.model.optimizer.lr: .interval(1).: cannot parse it",
        ),
        (
            {"model.optimizer.lr": "tag(log, interval(0, 1))"},
            [],
            "hydra.sweeper.params.model.optimizer.lr",
        ),
        ({}, ["data.batch_size=range(5, 1)"], "data.batch_size=range(5, 1)"),
    ],
)
def test_mistakes_name_the_key(make_cfg, params, arguments, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(params, arguments, make_cfg())


def test_unknown_key_suggests_the_close_one(make_cfg):
    with pytest.raises(ConfigError, match="did you mean model.optimizer.lr"):
        parse({"model.optimizer.lrr": "interval(0.1, 1)"}, [], make_cfg())


def test_grid_refuses_a_continuous_parameter(make_cfg):
    space = parse({"model.optimizer.lr": "interval(0.1, 1)"}, [], make_cfg())
    with pytest.raises(ConfigError, match="sampler=grid needs a finite set"):
        space.grid()


def test_nothing_to_search_is_an_empty_space_of_fixed_overrides(make_cfg):
    space = parse({}, ["data.batch_size=32"], make_cfg())
    assert space.distributions == {} and space.overrides({}) == ["data.batch_size=32"]
