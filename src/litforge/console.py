"""How a run talks to people: rich in an interactive terminal, plain lines elsewhere."""

from __future__ import annotations

import logging
import os
import sys

from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("litforge")


def interactive() -> bool:
    """True in a terminal a person watches; False under CI, pipes and log files."""
    return sys.stdout.isatty() and not os.environ.get("CI")


@rank_zero_only
def show_config(cfg: DictConfig) -> None:
    """The resolved config: a rich tree in a terminal, plain YAML in the log otherwise."""
    if not interactive():
        log.info("config:\n%s", OmegaConf.to_yaml(cfg, resolve=True))
        return
    import rich
    import rich.syntax
    import rich.tree

    tree = rich.tree.Tree("config", guide_style="dim")
    for key, value in cfg.items():
        branch = tree.add(f"[bold]{key}")
        text = (
            OmegaConf.to_yaml(value, resolve=True) if isinstance(value, DictConfig) else str(value)
        )
        branch.add(rich.syntax.Syntax(text.rstrip(), "yaml", theme="ansi_dark"))
    rich.print(tree)


@rank_zero_only
def info(message: str, *args: object) -> None:
    log.info(message, *args)


@rank_zero_only
def warn(message: str, *args: object) -> None:
    log.warning(message, *args)
