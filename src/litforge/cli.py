"""Entry-point plumbing shared by train.py and eval.py: Hydra, quoting, errors, warnings.

A recipe is a function `cfg -> metrics`; `entry_point(recipe, "train")` turns it into the
console command. `compose(...)` builds the same config in-process (tests, benchmarks).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import shutil
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hydra
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict

from litforge import launchers, multirun
from litforge.config_search import CONF_DIR, group_options
from litforge.errors import ConfigError, LitforgeError
from litforge.paths import unwritable

Recipe = Callable[[DictConfig], dict[str, Any]]

# `${litforge.first:a,b}`: the first of its arguments that is not null (hydra.run.dir uses it
# to fall back from run_name to a timestamp).
OmegaConf.register_new_resolver(
    "litforge.first", lambda *args: next((a for a in args if a is not None), None), replace=True
)


def entry_point(recipe: Recipe, config_name: str) -> Callable[[], None]:
    """`python <config_name>.py [overrides]`: compose conf/<config_name>.yaml, run `recipe`.

    The recipe's value of `cfg.optimized_metric` is returned to Hydra (what a sweeper reads).
    """

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)
    def hydra_main(cfg: DictConfig) -> float | None:
        silence_known_upstream_warnings()  # again: a launcher may run jobs in other processes
        with report_user_errors(Path(cfg.run_dir)), multirun.job_scope(cfg):
            metrics = recipe(cfg)
        return metrics.get(cfg.get("optimized_metric"))

    def main() -> None:
        sys.argv = quote_numeric_choices(sys.argv)
        silence_known_upstream_warnings()
        with report_user_errors():
            check_output_dir(sys.argv[1:])
            check_group_choices(sys.argv[1:], config_name)
            launchers.agree_on_stamp(sys.argv[1:])  # torchrun / srun ranks: one run dir
        hydra_main()

    return main


def compose(overrides: list[str], run_dir: str | Path, config_name: str = "train") -> DictConfig:
    """The config `python {config_name}.py *overrides` would see, writing into run_dir."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = hydra_compose(config_name=config_name, overrides=quote_numeric_choices(overrides))
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    return cfg


# Set while a sweeper runs a trial: errors go back to it instead of ending the process.
_ERRORS_TO_CALLER = contextvars.ContextVar("litforge_errors_to_caller", default=False)


@contextlib.contextmanager
def errors_to_caller() -> Iterator[None]:
    """Within this block `report_user_errors` re-raises (a sweep decides what a trial's
    error means for the trials after it)."""
    token = _ERRORS_TO_CALLER.set(True)
    try:
        yield
    finally:
        _ERRORS_TO_CALLER.reset(token)


@contextlib.contextmanager
def report_user_errors(run_dir: Path | None = None) -> Iterator[None]:
    """Turn a `LitforgeError` into one `error: ...` line and its exit status; a run
    directory the failed start left with nothing in it but its start-up records goes too.

    HYDRA_FULL_ERROR=1 (Hydra's own switch) lets the full traceback through.
    """
    try:
        yield
    except LitforgeError as err:
        if run_dir is not None and rank_zero_only.rank == 0:
            _remove_if_unused(run_dir)
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or _ERRORS_TO_CALLER.get():
            raise
        print(f"error: {err}", file=sys.stderr)
        _exit(err.exit_code)


def _exit(code: int) -> None:
    """sys.exit, unless one of our I/O threads (named `litforge-...`, e.g. an upload to a
    store that hangs) is still busy: Python would join it at exit and the process would
    outlive a preemption's grace period. What such a thread writes is staged locally first
    (with its marker), so leaving it behind loses nothing."""
    busy = [t for t in threading.enumerate() if t.name.startswith("litforge-") and not t.daemon]
    if not busy:
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def check_group_choices(overrides: list[str], config_name: str = "train") -> None:
    """`logger=bogus`: one line naming the group and its options, where Hydra would print a
    block with its search path. Options come from every directory on Hydra's search path
    (conf/ and `hydra.searchpath`); sweeps (`a,b`, `choice(...)`) and Hydra's own groups
    (`hydra/launcher=...`) are left to Hydra."""
    found = group_options(config_name, overrides)  # a search path that does not exist: one line
    for item in overrides:
        key, sep, value = item.partition("=")
        group, value = key.lstrip("+~"), value.strip("'\"")
        if not sep or not group or "/" in group or "@" in group or "." in group:
            continue
        if value == "" or any(c in value for c in ",()[]{}"):
            continue
        if found is None or not found.is_group(group):
            continue
        options = found.options(group)
        if value == "null" and found.required(group):
            raise ConfigError(
                f"{group}=null: a run needs a {group}; pick one of "
                f"{', '.join(found.places(group))}: {', '.join(options)}"
            )
        if value == "null":  # Hydra answers a null group choice with a traceback
            raise ConfigError(
                f"{group}=null: leave {group} out (by default none is picked), or pick one of "
                f"{', '.join(found.places(group))}: {', '.join(options)}"
            )
        if value not in options:
            raise ConfigError(
                f"{group}={value} is not an option of {', '.join(found.places(group))}: "
                f"{', '.join(options)}"
            )


def check_output_dir(overrides: list[str]) -> None:
    """Hydra creates the run directory before any of our code runs and answers a path it
    cannot create with a traceback; check where it will go first (cheap: no composition)."""
    multirun = bool({"-m", "--multirun"} & set(overrides))
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [item.split("=", 1)[1] for item in overrides if item.startswith(f"{key}=")]
    target = Path(given[-1] if given else ("multirun" if multirun else "outputs")).absolute()
    problem = unwritable(target)
    if problem:
        raise ConfigError(
            f"{key}={target}: cannot create the run directory there ({problem}); "
            f"pass {key}=PATH somewhere writable"
        )


def remove_unused_run_dir() -> None:
    """Rank 0: delete this Hydra run's directory if it holds only start-up records (a
    process about to leave through os._exit, which skips report_user_errors)."""
    from hydra.core.hydra_config import HydraConfig

    if rank_zero_only.rank == 0 and HydraConfig.initialized():
        _remove_if_unused(Path(HydraConfig.get().runtime.output_dir))


# What Hydra and run_record write before anything is trained.
_START_RECORDS = {"config.yaml", "run.json", "overrides.yaml", "hydra.yaml", "hparams.yaml"}


def _remove_if_unused(run_dir: Path) -> None:
    """Delete run_dir if Hydra made it (.hydra/) and every file in it is a start-up record,
    a log or hidden bookkeeping (a lock): checkpoints, metrics or anything else keep it."""
    if not (run_dir / ".hydra").is_dir():
        return
    files = [p for p in run_dir.rglob("*") if not p.is_dir()]
    if all(p.name in _START_RECORDS or p.suffix == ".log" or p.name.startswith(".") for p in files):
        shutil.rmtree(run_dir, ignore_errors=True)


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
    """Lightning 2.6 advertises its cloud products ("💡 Tip: ...") on every run, and says it
    skips its default model summary when the config (conf/callbacks) brings one."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not message.startswith(
            ("💡 Tip:", "Trainer already configured with model summary callbacks")
        )


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
