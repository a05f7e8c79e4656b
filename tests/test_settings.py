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
    evaluate = OmegaConf.to_container(make_cfg("ckpt_path=x.ckpt", config_name="eval"), resolve=False)
    for schema in all_schemas():
        if schema.GROUP_FILE is None or schema.GROUP.startswith("hydra."):
            # an option's values (precision=...), an experiment's; hydra.launcher is Hydra's
            # node, not in a job's config (tests/test_monitor_settings.py composes it)
            continue
        plain = evaluate if schema.GROUP_FILE == "litforge/eval_settings.yaml" else train
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


def _schema_names() -> tuple[set[str], dict[str, set[str]]]:
    top: set[str] = set()
    grouped: dict[str, set[str]] = {}
    for schema in all_schemas():
        for info in schema.infos():
            group, _, name = info.name.rpartition(".")
            (grouped.setdefault(group, set()).add(name) if group else top.add(name))
    return top, grouped


def second_defaults(source: str, where: str) -> list[str]:
    """`owner.get("key", default)` calls on a schema's key in `source`."""
    top, grouped = _schema_names()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)):  # fmt: skip
            continue
        name, owner = node.args[0].value, ast.unparse(node.func.value)
        if (name in top and owner in ("cfg", "config", "plain")) or any(
            owner.endswith(group) and name in names for group, names in grouped.items()
        ):
            found.append(f"{where}:{node.lineno} {owner}.get({name!r}, ...)")
    return found


def test_no_key_has_a_second_default_in_code():
    """`cfg.get("resume_shape", "adapt")` beside the schema's default is two homes: code reads
    the key (the composed config always holds it) or its schema's typed settings."""
    found = []
    for path in sorted((ROOT / "src" / "litforge").rglob("*.py")):
        found += second_defaults(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_the_scan_finds_a_second_default():
    sample = (
        "def f(cfg, opts):\n"
        "    a = cfg.get('resume_shape', 'adapt')\n"
        "    b = cfg.checkpoint.get('keep_last', 2)\n"
        "    return cfg.get('data', None), opts.get('keep_last', 2)\n"
    )
    assert second_defaults(sample, "x.py") == [
        "x.py:2 cfg.get('resume_shape', ...)",
        "x.py:3 cfg.checkpoint.get('keep_last', ...)",
    ]
