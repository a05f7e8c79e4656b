"""`litforge COMMAND [args]`: every command of the library behind one name.

Each subcommand runs the same code as its `python -m litforge.X` form, which users'
scripts call and which stays: `litforge.budget` and `litforge.plan` are aliases of the
commands here, `litforge.matmul_bench` and `litforge.consolidate` of the code they run.
"""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple


class Command(NamedTuple):
    module: str  # holds main(argv)
    prefix: tuple[str, ...]  # arguments put before the user's (a scaffold subcommand)
    summary: str


COMMANDS: dict[str, Command] = {
    "budget": Command("litforge.commands.budget", (), "memory of a training run: will it fit, what to change"),
    "plan": Command("litforge.commands.plan", (), "which card, how long and what it costs (on demand, spot)"),
    "export": Command("litforge.export", (), "a checkpoint as a Hugging Face model directory"),
    "consolidate": Command("litforge.checkpointing.consolidate", (), "a sharded checkpoint as one file"),
    "matmul-bench": Command("litforge.planning.matmul_bench", (), "this machine's matmul TFLOP/s per dtype"),
    "new-project": Command("litforge.scaffold.__main__", ("new-project",), "a project of your own, litforge pinned"),
    "new-experiment": Command("litforge.scaffold.__main__", ("experiment",), "conf/experiment/NAME.yaml (+ model, data, test)"),
    "update-template": Command("litforge.scaffold.__main__", ("update",), "take in template changes since the project was made"),
    "recipe": Command("litforge.scaffold.__main__", ("recipe",), "own the training loop: `recipe copy` into this project, `recipe diff`"),
    "config": Command("litforge.commands.config", (), "every litforge config key: type, default, doc (`config GROUP`)"),
    "shards": Command("litforge.commands.shards", (), "a DataModule's splits as shards at any fsspec URL (`shards write`)"),
    "dashboard": Command("litforge.sweeps.dashboard", (), "a sweep's study in optuna-dashboard"),
}  # fmt: skip


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {c.summary}" for name, c in COMMANDS.items()]
    return "\n".join(
        ["usage: litforge COMMAND [args]   (litforge COMMAND --help for its own)", "", *lines]
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        sys.exit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        sys.exit(2)
    command = COMMANDS[name]
    result = importlib.import_module(command.module).main([*command.prefix, *rest])
    if isinstance(result, int):
        sys.exit(result)
