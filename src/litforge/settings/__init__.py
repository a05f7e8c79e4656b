"""The kit every litforge-owned config group declares its keys with: one home per key.

A group's schema is a frozen dataclass beside the code that reads it. Each field holds the
key's default, its type, its rule (the allowed range, in words for a one-line error) and a
one-line doc. Nothing else states a default: the group's YAML in `litforge/conf/` is
generated from the schema (`litforge config --write`), and so is docs/config-reference.md;
tests fail when either is stale, and when code gives a litforge key a second default.

Dataclasses, not Hydra structured configs: those check types only, during composition, with
Hydra's multi-line errors, and would refuse the keys a user adds (`+checkpoint.x`); here the
rules run before anything is built, each a one-line error (litforge.validation.checks).
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
)


def key(default: Any, rule: Rule, doc: str, name: str | None = None) -> Any:
    """A schema field: its default, the rule its value must pass, and its one-line doc;
    `name` where the config key is not a Python name (`restore.from`)."""
    meta = {"rule": rule, "doc": doc, "key": name}
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
    when the schema's keys ride in another file (an option of a group sets them)."""

    GROUP: ClassVar[str] = ""
    TITLE: ClassVar[str] = ""
    GROUP_FILE: ClassVar[str | None] = None

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
        return {cls.dotted(_name(f)): f.metadata["rule"] for f in dataclasses.fields(cls)}

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The group's node as its YAML holds it: field name -> default."""
        return {_name(f): _default(f) for f in dataclasses.fields(cls)}

    @classmethod
    def of(cls: type[S], cfg: Any) -> S:
        """The typed settings of a composed config (DictConfig or dict): each value checked
        by its rule (one line naming the key and what is valid), a missing key its default."""
        node = _node(cfg, cls.GROUP)
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            name = _name(field)
            if node is not None and name in node:
                value = _plain(node[name])
                reason = field.metadata["rule"].problem(value)
                if reason is not None:
                    raise ConfigError(f"{cls.dotted(name)}={value!r} is invalid; {reason}")
                values[field.name] = value
        return cls(**values)


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
            if not (err.name or "").startswith(module.rsplit(".", 1)[0]):
                raise
    return found
