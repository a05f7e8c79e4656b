"""The schema covers every key litforge reads: one of them added to conf/ without a rule
fails here. The user's groups (model, data) have no rules: their signatures decide."""

from __future__ import annotations

import fnmatch

import pytest
from omegaconf import OmegaConf

from litforge.validation import schema
from tests.test_config import GROUPS, options


def every_composition(make_cfg):
    """The config of each option of each group (GPT pieces with their data), train and eval."""
    for group in GROUPS:
        for option in options(group):
            base = (
                ["experiment=gpt_char"] if f"{group}={option}" in ("model=gpt", "data=text") else []
            )
            yield make_cfg(*base, f"{group}={option}")
    yield make_cfg("ckpt_path=x.ckpt", config_name="eval")
    yield make_cfg(
        "trainer.max_time={days: 1}",
        "+checkpoint.storage_options.config_kwargs.connect_timeout=5",
    )


def test_every_key_of_every_option_has_a_rule_and_the_defaults_pass_it(make_cfg):
    # One test, not two: composing every option is most of its time (~20 s).
    used: set[str] = set()
    for cfg in every_composition(make_cfg):
        plain = OmegaConf.to_container(cfg, resolve=True)
        for key, _ in schema.litforge_leaves(plain):
            rule = schema.rule_for(key)
            assert rule is not None, f"{key} has no rule in litforge.validation.schema.RULES"
            used.update(p for p in schema.RULES if fnmatch.fnmatchcase(key, p))
        assert list(schema.problems(plain)) == []
    assert set(schema.RULES) - used == set(), "rules that match no key: stale entries"


@pytest.mark.parametrize(
    ("rule", "good", "bad"),
    [
        (schema.Int(1), [1, 10**9], [0, -1, 1.5, True, "3", None]),
        (schema.Num(0.0, 1.0, open_hi=True), [0, 0.5], [1.0, -0.1, float("nan"), "x", False]),
        (schema.SAFE_NAME, ["gpt-a", "lr=1e-3,bs=8", None], ["..", "a/b", "../x", "", ".hidden"]),
        (schema.DEVICES, [1, -1, "auto", [0, 1], "0,1"], [0, -2, [], "a,b", 1.5]),
        (schema.MAX_TIME, ["00:12:00:00", None], ["12h", "abc"]),
    ],
)
def test_rules_accept_and_refuse(rule, good, bad):
    assert [v for v in good if rule.problem(v) is not None] == []
    assert [v for v in bad if rule.problem(v) is None] == []
