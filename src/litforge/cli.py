"""Entry-point plumbing: how user errors reach the terminal."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

from omegaconf import OmegaConf

from litforge.checkpointing.preemption import Preempted
from litforge.checkpointing.uploader import UploadsPending
from litforge.errors import ConfigError

# `${litforge.first:a,b}`: the first of its arguments that is not null (hydra.run.dir uses it
# to fall back from run_name to a timestamp).
OmegaConf.register_new_resolver(
    "litforge.first", lambda *args: next((a for a in args if a is not None), None), replace=True
)

# conf/ at the project root. An absolute path, because Hydra resolves a relative
# config_path against the calling *module* (litforge.train -> a `conf` package) when the
# entry point lives in a package.
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


@contextlib.contextmanager
def report_user_errors() -> Iterator[None]:
    """Turn a user or run fault into one `error: ...` line and a non-zero exit status.

    HYDRA_FULL_ERROR=1 (Hydra's own switch) lets the full traceback through.
    """
    try:
        yield
    except (ConfigError, UploadsPending, Preempted) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        # 2: bad input; 128 + signal number: preempted (as a shell reports a signal); 1: store down
        code = 2 if isinstance(err, ConfigError) else 1
        sys.exit(128 + err.signum if isinstance(err, Preempted) else code)


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
