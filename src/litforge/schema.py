"""What every config key accepts: one table, checked before anything is built.

A table rather than Hydra structured configs: those check types only, during composition,
and fail with Hydra's multi-line error; ranges, "what would be valid" and one-line errors
need code anyway. `tests/test_schema.py` composes every option of every group and fails
when a key has no rule here, so a new key cannot land without one.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from litforge.precision import PRECISIONS


class Rule:
    """`problem(value)` is None when the value is valid, else what would be valid."""

    null: bool = False

    def problem(self, value: Any) -> str | None:
        valid = self.null if value is None else self.accepts(value)
        return None if valid else f"must be {self.describe()}"

    def describe(self) -> str:
        return f"{self.text()} (or null)" if self.null else self.text()

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def text(self) -> str:
        """What a valid value is, in words."""
        raise NotImplementedError


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class Int(Rule):
    lo: int | None = None
    hi: int | None = None
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return (
            _is_int(value)
            and (self.lo is None or value >= self.lo)
            and (self.hi is None or value <= self.hi)
        )

    def text(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"an integer from {self.lo} to {self.hi}"
        if self.lo is not None:
            return f"an integer >= {self.lo}"
        return f"an integer <= {self.hi}" if self.hi is not None else "an integer"


@dataclass
class Num(Rule):
    """A number in an interval; `open_lo`: strictly above lo."""

    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False
    open_hi: bool = False
    null: bool = False

    def accepts(self, value: Any) -> bool:
        if not _is_number(value) or value != value:  # NaN is no number a key wants
            return False
        above = self.lo is None or (value > self.lo if self.open_lo else value >= self.lo)
        below = self.hi is None or (value < self.hi if self.open_hi else value <= self.hi)
        return above and below

    def text(self) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.open_lo else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.open_hi else '<='} {self.hi:g}")
        return " and ".join(["a number", *parts]).replace("number and", "number")


@dataclass
class Bool(Rule):
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)

    def text(self) -> str:
        return "true or false"


@dataclass
class OneOf(Rule):
    choices: tuple[Any, ...]
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return any(value == c and type(value) is type(c) for c in self.choices)

    def text(self) -> str:
        return "one of " + ", ".join(str(c) for c in self.choices)


@dataclass
class Text(Rule):
    """A string, optionally matching `pattern` (described by `meaning`)."""

    pattern: str | None = None
    meaning: str = "a string"
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and (
            self.pattern is None or re.fullmatch(self.pattern, value) is not None
        )

    def text(self) -> str:
        return self.meaning


@dataclass
class Either(Rule):
    """Valid when any of `rules` accepts the value."""

    rules: tuple[Rule, ...]
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return any(rule.accepts(value) for rule in self.rules)

    def text(self) -> str:
        return ", or ".join(rule.describe() for rule in self.rules)


@dataclass
class ListOf(Rule):
    item: Rule
    length: int | None = None
    null: bool = False

    def accepts(self, value: Any) -> bool:
        return (
            isinstance(value, list)
            and len(value) > 0
            and (self.length is None or len(value) == self.length)
            and all(self.item.accepts(v) for v in value)
        )

    def text(self) -> str:
        size = f"{self.length} " if self.length else "1 or more "
        return f"a list of {size}values, each {self.item.describe()}"


class Free(Rule):
    """Anything: values that their own constructor checks (a `_target_` object's kwargs)."""

    null = True

    def accepts(self, value: Any) -> bool:
        return True

    def text(self) -> str:
        return "anything"


FRACTION = Either((Int(0), Num(0.0, 1.0)))  # a batch count, or a share of the batches
SAFE_NAME = Text(r"(?!\.{1,2}$)[A-Za-z0-9][A-Za-z0-9._=,+-]*", "a name of letters, digits and ._=,+- (no / or ..)", null=True)  # fmt: skip
DEVICES = Either((Int(1), OneOf((-1, "auto")), ListOf(Int(0)), Text(r"\d+(,\d+)*,?", "'0,1'")))
MAX_TIME = Text(r"\d+:\d{1,2}:\d{1,2}:\d{1,2}", "DD:HH:MM:SS, e.g. 00:12:00:00", null=True)

# Most specific first: the first pattern that matches a key decides (fnmatch, * spans dots).
RULES: dict[str, Rule] = {
    # conf/train.yaml, conf/eval.yaml
    "task_name": Text(),
    "seed": Int(0, 2**32 - 1),
    "run_dir": Text(),
    "run_name": SAFE_NAME,
    "resume": OneOf(("auto", "never")),
    "ckpt_path": Text(null=True),
    "test": Bool(),
    "optimized_metric": Text(null=True),
    "optimized_mode": OneOf(("min", "max")),
    "processes.rendezvous_timeout_s": Num(0.0, open_lo=True),
    "processes.oversubscribe": Bool(),
    "sample.prompt": Text(null=True),
    "sample.max_new_tokens": Int(1),
    "sample.temperature": Num(0.0, open_lo=True),
    "sample.top_k": Int(1, null=True),
    # conf/data
    "data._target_": Text(),
    "data.*_size": Int(1),  # batch_size, val_size, test_size
    "data.*_seed": Int(0),
    "data.shuffle": Bool(),
    "data.num_workers": Int(0),
    "data.block_size": Int(1),
    "data.train_fraction": Num(0.0, 1.0, open_lo=True, open_hi=True),
    "data.val_fraction": Num(0.0, 1.0, open_hi=True),
    # conf/model
    "model._target_": Text(),
    "model.net.channels": ListOf(Int(1)),
    "model.net.dropout": Num(0.0, 1.0, open_hi=True),
    "model.net.bias": Bool(),
    "model.net.num_classes": Int(2),
    "model.net.*": Int(1),  # sizes: in_channels, image_size, hidden, vocab, layers, heads, ...
    "model.optimizer.lr": Num(0.0, open_lo=True),
    "model.optimizer.betas": ListOf(Num(0.0, 1.0, open_hi=True), length=2),
    "model.optimizer.eps": Num(0.0, open_lo=True),
    "model.optimizer.weight_decay": Num(0.0),
    "model.scheduler": Free(),  # null, or the two keys below
    "model.scheduler.warmup_steps": Int(0),
    "model.scheduler.min_lr_ratio": Num(0.0, 1.0),
    "model.gradient_checkpointing": Bool(),
    # conf/trainer: lightning.Trainer's arguments
    "trainer.accelerator": OneOf(("auto", "cpu", "gpu", "cuda", "mps", "tpu")),
    "trainer.strategy": Free(),  # Lightning names the valid strategies itself
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
    # conf/checkpoint
    "checkpoint": Free(),  # null for checkpoint=none
    "checkpoint.dir": Text(r".*\S.*", "a local path or an fsspec URL such as s3://BUCKET/prefix"),
    "checkpoint.every_n_train_steps": Int(1, null=True),
    "checkpoint.train_time_interval": Num(0.0, open_lo=True, null=True),
    "checkpoint.save_on_validation": Bool(),
    "checkpoint.keep_last": Int(1),
    "checkpoint.monitor": Text(null=True),
    "checkpoint.mode": OneOf(("min", "max")),
    "checkpoint.async_upload": Bool(),
    "checkpoint.upload_retries": Int(1),
    "checkpoint.final_upload_timeout_s": Num(0.0),
    "checkpoint.timeout_s": Num(0.0, open_lo=True),
    "checkpoint.storage_options*": Free(),  # the fsspec filesystem's own keyword arguments
    "checkpoint.staging_dir": Text(),
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


def problems(config: dict[str, Any]) -> Iterator[tuple[str, Any, str]]:
    """(key, value, what is valid) for each value its rule refuses, in config order."""
    for key, value in leaves(config):
        rule = rule_for(key)
        if rule is not None and (reason := rule.problem(value)) is not None:
            yield key, value, reason
