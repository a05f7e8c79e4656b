"""One home per key: litforge's config keys are declared once, in their schemas
(litforge.settings), and the YAML Hydra composes and docs/config-reference.md are generated
from them."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from litforge.checkpointing.settings import CheckpointSettings
from litforge.commands import config as config_command
from litforge.errors import ConfigError
from litforge.settings import all_schemas

ROOT = Path(__file__).resolve().parents[1]


def test_the_generated_yaml_and_the_reference_are_fresh():
    assert config_command.stale(ROOT) == [], "run `litforge config --write`"


def test_a_changed_default_makes_them_stale(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / config_command.REFERENCE).write_text(config_command.reference())
    assert config_command.stale(tmp_path) == []
    field = next(f for f in dataclasses.fields(CheckpointSettings) if f.name == "keep_last")
    monkeypatch.setattr(field, "default", 5)
    assert set(config_command.stale(tmp_path)) == {
        "litforge/conf/checkpoint/default.yaml",
        config_command.REFERENCE,
    }


def test_the_composed_defaults_are_the_schemas(make_cfg):
    train = OmegaConf.to_container(make_cfg(), resolve=False)
    evaluate = OmegaConf.to_container(
        make_cfg("ckpt_path=x.ckpt", config_name="eval"), resolve=False
    )
    for schema in all_schemas():
        if schema.GROUP_FILE is None or schema.GROUP.startswith("hydra."):
            # an option's values (precision=...), an experiment's; hydra.launcher is Hydra's
            # node, not in a job's config (tests/test_monitor_settings.py composes it)
            continue
        plain = evaluate if schema.GROUP_FILE == "litforge/eval_settings.yaml" else train
        group, _, name = schema.GROUP.partition(".")
        if group == "callbacks" and name not in plain["callbacks"]:  # an opt-in callback
            plain = OmegaConf.to_container(make_cfg(f"callbacks=[default,{name}]"), resolve=False)
        node = plain
        for part in filter(None, schema.GROUP.split(".")):
            node = node[part]
        # run_dir: the test's compose gives its own (tmp_path), as train.py's Hydra would
        composed = {name: node[name] for name in schema.defaults() if name != "run_dir"}
        expected = {k: v for k, v in schema.defaults().items() if k != "run_dir"}
        assert composed == expected, schema.__name__  # conf/ holds no other default


def test_a_bad_value_is_one_line_naming_the_key(make_cfg):
    with pytest.raises(
        ConfigError, match=r"^checkpoint.keep_last=0 is invalid; must be an integer >= 1$"
    ):
        CheckpointSettings.of(make_cfg("checkpoint.keep_last=0"))


def test_config_lists_every_key_or_one_group(capsys):
    assert config_command.main([]) == 0
    everything = capsys.readouterr().out
    for schema in all_schemas():
        for info in schema.infos():
            assert f"  {info.name} = " in everything, info.name
    assert config_command.main(["checkpoint"]) == 0
    one = capsys.readouterr().out
    assert "checkpoint.keep_last = 2  [an integer >= 1]" in one
    assert "processes." not in one
    with pytest.raises(SystemExit, match="no litforge config group 'nope'; groups: .*checkpoint"):
        config_command.main(["nope"])


def test_write_runs_only_in_litforges_own_repository(tmp_path, monkeypatch, capsys):
    before = (config_command.CONF / "checkpoint" / "default.yaml").read_text()
    monkeypatch.chdir(tmp_path)  # a project, say: --write would rewrite the installed package
    assert config_command.main(["--write"]) == 2
    assert "run them in the litforge repository" in capsys.readouterr().err
    assert (config_command.CONF / "checkpoint" / "default.yaml").read_text() == before


def _leaf_names() -> set[str]:
    return {info.name.rpartition(".")[2] for schema in all_schemas() for info in schema.infos()}


# `.get(NAME, default)` calls whose NAME is a schema key's but that are not a second home.
NOT_SECOND_HOMES = {
    # Lightning's trainer.devices (its own default), not hydra.launcher.devices
    "trainer.get('devices', 'auto')",
    "cfg.trainer.get('devices', 'auto')",
    # A sweeper config that names no pruner (an upstream Optuna sweeper's) prunes nothing;
    # litforge's own optuna.yaml says median (SweeperSettings.pruner's doc says both).
    "settings.get('pruner', 'none')",
}


def second_defaults(source: str, where: str) -> list[str]:
    """`owner.get("key", default)` on a schema key's name with a default of its own: a
    second home for that default (None, and a default read from a schema, are not)."""
    names = _leaf_names()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in names):  # fmt: skip
            continue
        default = ast.unparse(node.args[1])
        if default == "None" or "Settings." in default or ast.unparse(node) in NOT_SECOND_HOMES:
            continue
        found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_key_has_a_second_default_in_code():
    """`cfg.get("resume_shape", "adapt")` beside the schema's default is two homes: code reads
    its schema's typed settings (or the key, which the composed config always holds)."""
    found = []
    for root in (ROOT / "src" / "litforge", ROOT / "src" / "hydra_plugins"):
        for path in sorted(root.rglob("*.py")):
            found += second_defaults(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_the_scan_finds_a_second_default():
    sample = (
        "def f(cfg, node):\n"
        "    a = cfg.get('resume_shape', 'adapt')\n"
        "    b = node.get('keep_last', 2)\n"
        "    c = node.get('stale_s', SweeperSettings.stale_s)\n"
        "    return cfg.get('data', 1), node.get('cache_key_file', None)\n"
    )
    assert second_defaults(sample, "x.py") == [
        "x.py:2 cfg.get('resume_shape', 'adapt')",
        "x.py:3 node.get('keep_last', 2)",
    ]
