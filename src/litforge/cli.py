"""Entry-point plumbing shared by train.py and eval.py: Hydra, quoting, errors, warnings.

A recipe is a function `cfg -> metrics`; `entry_point(recipe, "train")` turns it into the
console command. `compose(...)` builds the same config in-process (tests, benchmarks).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hydra
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

from litforge.errors import LitforgeError

Recipe = Callable[[DictConfig], dict[str, Any]]

# `${litforge.first:a,b}`: the first of its arguments that is not null (hydra.run.dir uses it
# to fall back from run_name to a timestamp).
OmegaConf.register_new_resolver(
    "litforge.first", lambda *args: next((a for a in args if a is not None), None), replace=True
)

# conf/ at the project root. An absolute path, because Hydra resolves a relative
# config_path against the calling *module* (litforge.cli -> a `conf` package) when the
# entry point lives in a package.
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


def entry_point(recipe: Recipe, config_name: str) -> Callable[[], None]:
    """`python <config_name>.py [overrides]`: compose conf/<config_name>.yaml, run `recipe`.

    The recipe's value of `cfg.optimized_metric` is returned to Hydra (what a sweeper reads).
    """

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)
    def hydra_main(cfg: DictConfig) -> float | None:
        with report_user_errors():
            metrics = recipe(cfg)
        return metrics.get(cfg.get("optimized_metric"))

    def main() -> None:
        sys.argv = quote_numeric_choices(sys.argv)
        silence_known_upstream_warnings()
        hydra_main()

    return main


def compose(overrides: list[str], run_dir: str | Path, config_name: str = "train") -> DictConfig:
    """The config `python {config_name}.py *overrides` would see, writing into run_dir."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = hydra_compose(config_name=config_name, overrides=quote_numeric_choices(overrides))
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    return cfg


@contextlib.contextmanager
def report_user_errors() -> Iterator[None]:
    """Turn a `LitforgeError` into one `error: ...` line and its exit status.

    HYDRA_FULL_ERROR=1 (Hydra's own switch) lets the full traceback through.
    """
    try:
        yield
    except LitforgeError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)


def quote_numeric_choices(
    overrides: list[str], groups: tuple[str, ...] = ("precision",)
) -> list[str]:
    """`precision=32` -> `precision='32'`.

    Hydra's override grammar parses 32 as an integer and then rejects it as a config-group
    choice ("Config group override must be a string"); quoting keeps `precision=32` typable.
    """
    quoted = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") in groups and value.isdigit():
            item = f"{key}='{value}'"
        quoted.append(item)
    return quoted


class _DropLightningTips(logging.Filter):
    """Lightning 2.6 advertises its cloud products ("💡 Tip: ...") on every run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("💡 Tip:")


def silence_known_upstream_warnings() -> None:
    """Messages every run would print that say nothing about the user's run."""
    # torch 2.13 + lightning 2.6.6, on every fit; Lightning's to fix.
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
    )
    # torchdata 0.11's StatefulDataLoader calls torch.set_vital, deprecated in torch 2.13.
    warnings.filterwarnings("ignore", message=r"'set_vital' is deprecated", category=UserWarning)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_DropLightningTips())
