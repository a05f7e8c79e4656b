"""Config nodes with a `_target_`, checked against the signature of what they build.

Before anything is built, each `{_target_: ..., key: value}` node of the user's groups
(model, data, callbacks, logger) must name something importable whose parameters take its
keys: an unknown key, a required argument left out or a value that contradicts the
constructor's annotation is one line naming the config path. There is no table of the
user's keys: the user's own signature is the schema.
"""

from __future__ import annotations

import difflib
import inspect
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import typing_extensions
from hydra._internal.utils import _locate

from litforge.errors import ConfigError
from litforge.extras import missing_extra

# Hydra's own keys of an instantiable node, not arguments of the target.
HYDRA_KEYS = frozenset({"_target_", "_partial_", "_recursive_", "_convert_", "_args_"})


def check_tree(node: Any, path: str) -> None:
    """Check every `_target_` node in a plain (resolved) config subtree at `path`."""
    for where, target_node in _target_nodes(node, path):
        check_node(target_node, where)


def _target_nodes(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if "_target_" in node:
            yield path, node
        for key, value in node.items():
            if key not in HYDRA_KEYS:
                yield from _target_nodes(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _target_nodes(value, f"{path}[{i}]")


def locate(node: Mapping[str, Any], path: str) -> Any:
    """The object `node._target_` names; one line when it does not import."""
    name = node["_target_"]
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{path}._target_={name!r} must be a dotted name, e.g. my_lab.nets.MLP")
    try:
        # Hydra's own resolver of `_target_` (hydra.utils.get_object logs an ERROR first).
        return _locate(name)
    except Exception as err:  # noqa: BLE001 - Hydra wraps ImportError in its own type
        cause = err.__cause__ or err
        module = name.rpartition(".")[0] or name
        reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        extra = missing_extra(cause)
        if extra is not None:
            raise ConfigError(f"{path}._target_={name}: {extra}") from None
        if isinstance(cause, (ImportError, AttributeError)):  # not found where it was looked for
            raise ConfigError(
                f"{path}._target_={name} cannot be imported (module {module}: {reason}); "
                "is the package installed, or its directory on PYTHONPATH?"
            ) from None
        if isinstance(cause, SyntaxError):  # found, and broken: where
            reason = f"{cause.msg} ({cause.filename}, line {cause.lineno})"
        raise ConfigError(
            f"{path}._target_={name} cannot be imported: importing {module} raised "
            f"{type(cause).__name__}: {reason}"
        ) from None


def signature_of(target: Any) -> inspect.Signature | None:
    """The parameters a call of `target` takes (a class: its __init__); None: unknown."""
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):  # builtins without a signature
        return None


def check_node(node: Mapping[str, Any], path: str) -> None:
    """One `_target_` node: importable, every key an argument, every required one given
    (unless `_partial_`: the caller supplies the rest), values as annotated."""
    target = locate(node, path)
    signature = signature_of(target)
    if signature is None:
        return
    params = signature.parameters
    hints = _hints(target)
    unpacked = unpacked_keywords(params, hints)
    takes_any = not unpacked and any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )
    named = {
        n: p
        for n, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    optional = inspect.Parameter.KEYWORD_ONLY
    named |= {n: inspect.Parameter(n, optional, default=None) for n in unpacked}
    given = [k for k in node if k not in HYDRA_KEYS]
    name = node["_target_"]
    for key in given:
        if key not in named and not takes_any:
            close = difflib.get_close_matches(str(key), list(named), n=1)
            hint = f"; did you mean {path}.{close[0]}?" if close else ""
            raise ConfigError(
                f"{path}.{key} is not an argument of {name} (it takes: "
                f"{', '.join(named) or 'no keyword arguments'}){hint}"
            )
    if not node.get("_partial_", False) and not node.get("_args_"):
        missing = [
            n for n, p in named.items() if p.default is inspect.Parameter.empty and n not in node
        ]
        if missing:
            raise ConfigError(
                f"{path}: {name} requires {', '.join(missing)}; pass {path}.{missing[0]}=..."
            )
    hints |= unpacked
    for key in given:
        if key in hints and not _is_node(node[key]) and conforms(node[key], hints[key]) is False:
            raise ConfigError(
                f"{path}.{key}={_show(node[key])} is invalid; {name} takes {_describe(hints[key])}"
            )


def unpacked_keywords(
    params: Mapping[str, inspect.Parameter], hints: dict[str, Any]
) -> dict[str, Any]:
    """`**kwargs: Unpack[SomeTypedDict]` (PEP 692, e.g. litforge.LoaderArgs): the keys it
    takes and their types; {} for a plain `**kwargs` (anything) or none."""
    var = next((p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    if var is None:
        return {}
    hint = hints.get(var.name)
    if typing_extensions.get_origin(hint) not in _UNPACK:
        return {}
    (typed,) = typing_extensions.get_args(hint)
    if not typing_extensions.is_typeddict(typed):
        return {}
    return typing_extensions.get_type_hints(typed)


_UNPACK = {typing_extensions.Unpack, getattr(typing, "Unpack", typing_extensions.Unpack)}


def _is_node(value: Any) -> bool:
    return isinstance(value, dict) and "_target_" in value


def _show(value: Any) -> str:
    return "''" if value == "" else str(value)


def _hints(target: Any) -> dict[str, Any]:
    """The target's resolved parameter annotations; those that do not resolve are left out
    (a forward reference to a name the module never imports says nothing checkable)."""
    func = target.__init__ if inspect.isclass(target) else target
    try:
        return typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - unresolvable string annotations
        raw = getattr(func, "__annotations__", {}) or {}
        return {k: v for k, v in raw.items() if not isinstance(v, str)}


def conforms(value: Any, hint: Any) -> bool | None:
    """Whether a plain config value fits an annotation: True, False, or None when the
    annotation is beyond what a config value can be checked against (a class, a Callable).
    Lists stand for tuples and sequences (YAML has no tuple); an int is a valid float."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    if hint is type(None) or hint is None:
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        verdicts = [conforms(value, a) for a in args]
        return True if True in verdicts else (None if None in verdicts else False)
    if origin is typing.Literal:
        return value in args
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    container = origin or hint
    if container in (list, tuple, Sequence, typing.Sequence) or container is set:
        if not isinstance(value, list):
            return False
        item = args[0] if args and (container is not tuple or args[-1] is Ellipsis) else None
        if container is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                return False
            verdicts = [conforms(v, a) for v, a in zip(value, args, strict=True)]
            return False not in verdicts
        if item is None:
            return True
        return not any(conforms(v, item) is False for v in value)
    if container in (dict, Mapping, typing.Mapping):
        return isinstance(value, dict)
    return None


_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
          list: "a list", tuple: "a list", dict: "a mapping"}  # fmt: skip


def _describe(hint: Any) -> str:
    """An annotation in words: `int | None` -> 'an integer or null'."""
    if typing.get_origin(hint) is typing.Union or isinstance(hint, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(hint))
    base = typing.get_origin(hint) or hint
    fixed = typing.get_args(hint) if base is tuple else ()
    if fixed and Ellipsis not in fixed and len(set(fixed)) == 1:
        return f"a list of {len(fixed)} {_describe(fixed[0]).split(' ', 1)[-1]}s"
    if base in _WORDS:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        of = (
            f" of {_describe(args[0]).split(' ', 1)[-1]}s" if base in (list, tuple) and args else ""
        )
        return _WORDS[base] + of
    return str(hint).replace("typing.", "")


def require_partial(node: Any, path: str, called_with: str) -> None:
    """An optimizer or scheduler node must be `_partial_: true`: the module calls it."""
    if isinstance(node, dict) and "_target_" in node and not node.get("_partial_", False):
        raise ConfigError(
            f"{path}._target_={node['_target_']} needs {path}._partial_=true: the module "
            f"calls it with {called_with}, so it cannot be built from the config alone"
        )
