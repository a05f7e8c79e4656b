"""The kit every litforge-owned config group declares its keys with: one home per key.

A group's schema is a frozen dataclass beside the code that reads it. Each field holds the
key's default, its type, its rule (the allowed range, in words for a one-line error) and a
one-line doc. Nothing else states a default: the group's YAML in `litforge/conf/` is
generated from the schema (`litforge config --write`), and so is docs/config-reference.md;
tests fail when either is stale, and when code gives a litforge key a second default.

Dataclasses, not Hydra structured configs: those check types only, during composition, with
Hydra's multi-line errors, and would refuse the keys a user adds (`+checkpoint.x`); here the
rules run before anything is built, each a one-line error (litforge.validation.checks).
A node that builds an object (a callback's, the launcher's `_target_`) is that object's
keyword arguments: its class takes its defaults from the schema and checks what it is
given with `checked`, as it is built.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from litforge.errors import ConfigError
from litforge.settings.rules import Rule

# Every schema, as module:Class, in the order `litforge config` and the reference list them.
# Strings: a schema lives with its capability, and this foundation imports none of them.
SCHEMAS = (
    "litforge.run_settings:RunSettings",
    "litforge.run_settings:ResumeSettings",
    "litforge.checkpointing.settings:CheckpointSettings",
    "litforge.checkpointing.settings:RestoreSettings",
    "litforge.launch.settings:ProcessSettings",
    "litforge.compiling_settings:CompileSettings",
    "litforge.callbacks.microbatch_settings:MicrobatchSettings",
    "litforge.models.settings:FreezeSettings",
    "litforge.precision_settings:PrecisionSettings",
    "litforge.evaluation_settings:SampleSettings",
    "litforge.evaluation_settings:InferenceSettings",
    "litforge.precision_checks.training_ab.settings:PrecisionABSettings",
    "litforge.monitors.numerics.settings:NumericsSettings",
    "litforge.monitors.memory_budget_settings:MemoryBudgetSettings",
    "litforge.monitors.throughput_settings:ThroughputSettings",
    "litforge.monitors.step_breakdown_settings:StepBreakdownSettings",
    "litforge.sweeps.settings:SweeperSettings",
    "litforge.sweeps.pool.settings:LauncherSettings",
)


# The one line a refused value gets, unless its field words its own (`key(error=...)`).
REFUSED = "{key}={value!r} is invalid; {reason}"


def key(
    default: Any, rule: Rule, doc: str, name: str | None = None, error: str | None = None
) -> Any:
    """A schema field: its default, the rule its value must pass, and its one-line doc;
    `name` where the config key is not a Python name (`restore.from`); `error` where the
    refusal says more than the rule's words (a format of key, value, reason and default)."""
    meta = {"rule": rule, "doc": doc, "key": name, "error": error}
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class KeyInfo:
    """One key as `litforge config` and the reference show it."""

    name: str  # dotted, e.g. checkpoint.keep_last
    type: str  # what a valid value is, in words
    default: Any
    doc: str


S = TypeVar("S", bound="Settings")


@dataclass(frozen=True)
class Settings:
    """Base of a group's schema. GROUP is the dotted node the keys live under ("" for
    top-level keys); GROUP_FILE the YAML (under litforge/conf/) generated from it, or None
    when the schema's keys ride in another file (an option of a group sets them).

    For a node that builds an object: TARGET, its `_target_` (written first), whose keyword
    arguments the keys are. NODE: the name GROUP_FILE nests the keys under (`numerics` in
    callbacks/numerics.yaml; "" for none), where the file's place in conf/ does not say it.
    HEADER: the file's opening comment in place of the docstring, lines kept as written."""

    GROUP: ClassVar[str] = ""
    TITLE: ClassVar[str] = ""
    GROUP_FILE: ClassVar[str | None] = None
    TARGET: ClassVar[str | None] = None
    NODE: ClassVar[str | None] = None
    HEADER: ClassVar[str | None] = None
    # `_recursive_: false` after `_target_`, for an object that builds its own nodes.
    RECURSIVE: ClassVar[bool | None] = None

    @classmethod
    def infos(cls) -> Iterator[KeyInfo]:
        for field in dataclasses.fields(cls):
            rule = field.metadata["rule"]
            yield KeyInfo(cls.dotted(_name(field)), rule.describe(), _default(field),
                          field.metadata["doc"])  # fmt: skip

    @classmethod
    def dotted(cls, name: str) -> str:
        return f"{cls.GROUP}.{name}" if cls.GROUP else name

    @classmethod
    def rules(cls) -> dict[str, Rule]:
        """The rules checked before anything is built (litforge.validation.schema). None for
        a TARGET's node: its object checks them as it is built, each in its own words, and a
        user's own `_target_` there takes other arguments."""
        if cls.TARGET is not None:
            return {}
        return {cls.dotted(_name(f)): f.metadata["rule"] for f in dataclasses.fields(cls)}

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The group's node as its YAML holds it: field name -> default."""
        return {_name(f): _default(f) for f in dataclasses.fields(cls)}

    @classmethod
    def check_across(cls, plain: dict[str, Any]) -> None:
        """Rules that span this group's keys and others' (a plain, resolved config): raise a
        one-line ConfigError. Run before each key's own rule, so a value that is wrong only
        next to another key gets the message about both."""

    @classmethod
    def of(cls: type[S], cfg: Any) -> S:
        """The typed settings of a composed config (DictConfig or dict): each value checked
        by its rule (one line naming the key and what is valid), a missing key its default."""
        node = _node(cfg, cls.GROUP)
        return cls.checked(**{f.name: node[_name(f)] for f in dataclasses.fields(cls)
                              if node is not None and _name(f) in node})  # fmt: skip

    @classmethod
    def checked(cls: type[S], **values: Any) -> S:
        """The typed settings of `values` (by field name; a missing one its default), each
        checked by its rule: a refused one is a ConfigError, one line naming the key."""
        fields = [f for f in dataclasses.fields(cls) if f.name in values]
        if unknown := set(values) - {f.name for f in fields}:
            raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
        plain: dict[str, Any] = {}
        for field in fields:  # in the schema's order: the first bad key is the one named
            value = plain[field.name] = _plain(values[field.name])
            reason = field.metadata["rule"].problem(value)
            if reason is not None:
                said = field.metadata["error"] or REFUSED
                raise ConfigError(said.format(key=cls.dotted(_name(field)), value=value,
                                              reason=reason, default=_default(field)))  # fmt: skip
        return cls(**plain)


def _name(field: dataclasses.Field) -> str:
    return field.metadata.get("key") or field.name


def _default(field: dataclasses.Field) -> Any:
    factory = field.default_factory
    return factory() if callable(factory) else field.default


def _node(cfg: Any, group: str) -> Any:
    node = cfg
    for part in [p for p in group.split(".") if p]:
        if node is None or part not in node:
            return None
        node = node[part]
    return node


def _plain(value: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def all_schemas() -> list[type[Settings]]:
    found = []
    for spec in SCHEMAS:
        module, _, name = spec.partition(":")
        try:
            found.append(getattr(importlib.import_module(module), name))
        except ModuleNotFoundError as err:  # a deleted optional capability
            missing = err.name or ""
            # the schema's module, a package above it (litforge.monitors for
            # litforge.monitors.numerics.settings), or a module beside it
            if not (f"{module}.".startswith(f"{missing}.")
                    or missing.startswith(module.rsplit(".", 1)[0])):  # fmt: skip
                raise
    return found
