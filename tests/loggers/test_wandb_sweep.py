"""conf/wandb_sweep.yaml: the command `wandb agent` builds from it composes with Hydra."""

from __future__ import annotations

import yaml

from tests.helpers import ROOT


def agent_command(sweep: dict, values: dict) -> list[str]:
    """What `wandb agent` runs for one set of values (its documented macros)."""
    macros = {"${env}": [], "${program}": [sweep["program"]],
              "${args_no_hyphens}": [f"{k}={v}" for k, v in values.items()]}  # fmt: skip
    return [part for item in sweep["command"] for part in macros.get(item, [item])]


def test_the_agents_command_composes_and_optimizes_the_experiments_metric(make_cfg):
    sweep = yaml.safe_load((ROOT / "conf" / "wandb_sweep.yaml").read_text())
    values = {
        "model.optimizer.lr": 0.002,
        "model.optimizer.weight_decay": 1e-5,
        "data.batch_size": 32,
    }
    command = agent_command(sweep, values)
    assert command[:2] == ["python", "train.py"] and (ROOT / command[1]).is_file()
    cfg = make_cfg(*command[2:])
    assert cfg.model.optimizer.lr == 0.002 and cfg.data.batch_size == 32
    assert "wandb" in cfg.logger
    assert sweep["metric"]["name"] == cfg.optimized_metric
    assert sweep["metric"]["goal"] == {"max": "maximize", "min": "minimize"}[cfg.optimized_mode]
    assert set(sweep["parameters"]) == set(values)
