"""How a run talks to people: rich in an interactive terminal, plain lines elsewhere."""

from __future__ import annotations

import logging
import os
import sys

from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from litforge.run_settings import RunSettings

log = logging.getLogger("litforge")


def interactive() -> bool:
    """True in a terminal a person watches; False under CI, pipes and log files."""
    return sys.stdout.isatty() and not os.environ.get("CI")


@rank_zero_only
def show_config(cfg: DictConfig) -> None:
    """One line: the overrides this run was given and where its whole config is written.
    With `print_config=true`, the resolved config itself: a rich tree in a terminal, plain
    YAML in the log otherwise."""
    if not RunSettings.of(cfg).print_config:
        given = " ".join(task_overrides()) or "none (the defaults)"
        log.info(
            "overrides: %s; the whole config: %s/config.yaml (print_config=true prints it)",
            given, cfg.run_dir,
        )  # fmt: skip
        return
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


def task_overrides() -> list[str]:
    """The command line's overrides of this run (Hydra's record; none outside a Hydra app)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)
