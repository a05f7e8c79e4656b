"""What the keys of a composed config accept: one table, checked before anything is built.

litforge's own groups bring their rules from their schemas (litforge.settings: each key's
default, type, range and doc, beside the code that reads it); the Trainer's arguments
(Lightning's keys) have theirs here. The user's groups (`model`, `data`, and `_target_`
objects in callbacks and loggers) are checked against the signatures of what they build
(litforge.validation.targets), never here. `tests/test_schema.py` composes every option of
every group and fails when one of litforge's keys has no rule.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from typing import Any

from litforge.precision import PRECISIONS
from litforge.run_settings import SAFE_NAME as SAFE_NAME  # rules below and tests use it
from litforge.settings import all_schemas
from litforge.settings.rules import Bool, Either, Free, Int, ListOf, Num, OneOf, Rule, Text

FRACTION = Either((Int(0), Num(0.0, 1.0)))  # a batch count, or a share of the batches
DEVICES = Either((Int(1), OneOf((-1, "auto")), ListOf(Int(0)), Text(r"\d+(,\d+)*,?", "'0,1'")))
MAX_TIME = Text(r"\d+:\d{1,2}:\d{1,2}:\d{1,2}", "DD:HH:MM:SS, e.g. 00:12:00:00", null=True)

# Most specific first: the first pattern that matches a key decides (fnmatch, * spans dots).
# litforge's own groups come from their schemas (litforge.settings); what stays here is
# the Trainer's arguments (Lightning's keys) and the `_target_` groups.
RULES: dict[str, Rule] = {
    **{name: rule for schema in all_schemas() for name, rule in schema.rules().items()},
    # conf/trainer: lightning.Trainer's arguments
    "trainer.accelerator": OneOf(("auto", "cpu", "gpu", "cuda", "mps", "tpu")),
    "trainer.strategy*": Free(),  # a name Lightning checks, or a {_target_: ...} object
    "trainer.devices": DEVICES,
    "trainer.num_nodes": Int(1),
    "trainer.precision": OneOf(PRECISIONS),
    "trainer.fast_dev_run": Either((Bool(), Int(1))),
    "trainer.max_epochs": Int(-1, null=True),
    "trainer.min_epochs": Int(0, null=True),
    "trainer.max_steps": Either((OneOf((-1,)), Int(1))),
    "trainer.min_steps": Int(0, null=True),
    "trainer.max_time": MAX_TIME,
    "trainer.max_time.*": Int(0),  # the {days: , hours: , minutes: , seconds: } form
    "trainer.limit_*_batches": Either((Int(0), Num(0.0, 1.0)), null=True),
    "trainer.overfit_batches": FRACTION,
    "trainer.val_check_interval": Either((Int(1), Num(0.0, 1.0, open_lo=True)), null=True),
    "trainer.check_val_every_n_epoch": Int(1, null=True),
    "trainer.num_sanity_val_steps": Int(-1, null=True),
    "trainer.log_every_n_steps": Int(1, null=True),
    "trainer.accumulate_grad_batches": Int(1),
    "trainer.gradient_clip_val": Num(0.0, null=True),
    "trainer.gradient_clip_algorithm": OneOf(("norm", "value"), null=True),
    "trainer.deterministic": Either((Bool(), OneOf(("warn",))), null=True),
    "trainer.reload_dataloaders_every_n_epochs": Int(0),
    "trainer.default_root_dir": Text(null=True),
    "trainer.model_registry": Text(null=True),
    "trainer.profiler*": Free(),  # null, a name, or a {_target_: ...} object
    "trainer.plugins": Free(),
    "trainer.enable_*": Bool(null=True),
    "trainer.*": Bool(null=True),  # the remaining switches (benchmark, inference_mode, ...)
    # conf/callbacks, conf/logger: `_target_` objects whose constructors check their kwargs
    "callbacks.*": Free(),
    "logger.*": Free(),
    "checkpoint": Free(),  # null for checkpoint=none
    "checkpoint.storage_options.*": Free(),  # the fsspec filesystem's own keyword arguments
}


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every scalar, list, null or empty mapping in a plain config."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, node


def rule_for(key: str) -> Rule | None:
    for pattern, rule in RULES.items():
        if fnmatch.fnmatchcase(key, pattern):
            return rule
    return None


# The groups whose keys belong to the user's code: their signatures decide.
# Groups whose keys are the project's: `paths` is lightning-hydra-template's, which
# litforge only provides (src/litforge/conf/paths/default.yaml) and never reads.
USER_GROUPS = ("model", "data", "paths")


def litforge_leaves(config: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """leaves() of every key litforge reads (the user's groups left out)."""
    for key, value in config.items():
        if key not in USER_GROUPS:
            yield from leaves({key: value})
        elif key == "model" and isinstance(value, dict) and "freeze" in value:
            yield "model.freeze", value["freeze"]  # litforge's key in the user's group


def problems(config: dict[str, Any]) -> Iterator[tuple[str, Any, str]]:
    """(key, value, what is valid) for each value its rule refuses, in config order."""
    for key, value in litforge_leaves(config):
        rule = rule_for(key)
        if rule is not None and (reason := rule.problem(value)) is not None:
            yield key, value, reason
