"""The recipe names no capability: `train()` reads as the run's steps, and a feature
attaches through the callbacks, checkpointing's setup or build_module, never as a branch
here. These checks fail when train() grows one."""

from __future__ import annotations

import ast
import inspect
import textwrap

from litforge import training

# The config keys the recipe's own steps read: the seed, where the run lives, whether to
# test, and the precision asked for (for the record). A capability's key is not one.
RECIPE_KEYS = {"seed", "run_dir", "test", "trainer"}


def _train_function() -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(training.train)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _keys_read(function: ast.FunctionDef) -> set[str]:
    """`cfg.NAME` and `cfg.get("NAME")` of the function's body."""
    found = set()
    for node in ast.walk(function):
        is_name = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if is_name and node.value.id == "cfg" and node.attr != "get":
            found.add(node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "cfg" and node.func.attr == "get":
                found.add(str(ast.literal_eval(node.args[0])))
    return found


def test_train_reads_only_the_recipes_own_keys():
    assert _keys_read(_train_function()) <= RECIPE_KEYS


def test_train_branches_only_on_whether_to_test():
    function = _train_function()
    branches = [n for n in ast.walk(function) if isinstance(n, (ast.If, ast.IfExp, ast.Match))]
    # cfg.test: the key always composes (litforge/settings.yaml), with its one default there
    assert [ast.unparse(b.test) for b in branches] == ["cfg.test"]
    loops = [n for n in ast.walk(function) if isinstance(n, (ast.For, ast.While))]
    assert loops == []
    # One try: its finally frees the run's locks; it catches nothing.
    tries = [n for n in ast.walk(function) if isinstance(n, ast.Try)]
    assert len(tries) == 1 and tries[0].handlers == [] and tries[0].finalbody


def test_train_is_at_most_40_lines():
    lines = inspect.getsource(training.train).splitlines()
    assert len(lines) <= 40, len(lines)


def test_the_keys_reader_sees_a_capability_branch():
    # The checks above would see a branch like the ones the recipe used to hold.
    source = "def train(cfg):\n    if cfg.get('microbatch', {}).get('auto'):\n        pass\n"
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    assert _keys_read(function) - RECIPE_KEYS == {"microbatch"}
