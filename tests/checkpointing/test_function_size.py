"""Checkpointing reads in small pieces: no function of litforge.checkpointing is over 40
lines or holds more than 5 `if`s (if/elif statements and conditional expressions, those of
any function nested in it included)."""

from __future__ import annotations

import ast

from tests.helpers import ROOT

PACKAGE = ROOT / "src" / "litforge" / "checkpointing"
MAX_LINES = 40
MAX_IFS = 5


def sizes(source: str) -> dict[str, tuple[int, int]]:
    """Each function's (lines, ifs) by its qualified name."""
    found: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = f"{prefix}{getattr(child, 'name', '')}"
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                ifs = sum(isinstance(n, (ast.If, ast.IfExp)) for n in ast.walk(child))
                found[name] = (lines, ifs)
            visit(child, f"{name}." if isinstance(child, (ast.ClassDef, ast.FunctionDef,
                                                          ast.AsyncFunctionDef)) else prefix)  # fmt: skip

    visit(ast.parse(source), "")
    return found


def test_the_counter_counts_lines_and_every_kind_of_if():
    source = "def f(x):\n    if x:\n        return 1\n    elif x > 1:\n        pass\n    return 2 if x else 3\n"
    assert sizes(source) == {"f": (6, 3)}
    nested = "class C:\n    def m(self):\n        def inner():\n            if 1: pass\n        return inner\n"
    assert sizes(nested) == {"C.m": (4, 1), "C.m.inner": (2, 1)}


def test_no_checkpointing_function_is_over_40_lines_or_5_ifs():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert modules, PACKAGE
    over = {
        f"{path.relative_to(PACKAGE)}::{name}": size
        for path in modules
        for name, size in sizes(path.read_text()).items()
        if size[0] > MAX_LINES or size[1] > MAX_IFS
    }
    assert over == {}, "split these (lines, ifs): " + ", ".join(f"{k} {v}" for k, v in over.items())
