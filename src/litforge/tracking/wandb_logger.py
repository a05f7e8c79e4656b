"""Weights & Biases that never asks: online with a key, offline without, files in the run dir.

`mode=auto` follows the user's WANDB_MODE when it is set (offline, disabled, online); else
it runs online when an API key is there (WANDB_API_KEY, or a `wandb login` entry in
~/.netrc) and offline otherwise, saying where the run is and how to upload it. A
forced `mode=online` without a key is refused before training, since wandb would prompt
for one. Everything wandb writes (run files, its cache, config and debug logs) goes under
`save_dir`, not the home directory. The run id is kept in `save_dir/wandb-run-id`, so a
resumed run (same run_name, a retried sweep trial) continues the same W&B run.
"""

from __future__ import annotations

import logging
import netrc
import os
import re
import uuid
from pathlib import Path

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import WandbLogger

from litforge.errors import ConfigError
from litforge.extras import require
from litforge.tracking import run_ids

require("wandb")  # its extra (pyproject.toml); missing: one line before any training

log = logging.getLogger("litforge")
MODES = ("auto", "online", "offline", "disabled")
ID_FILE = run_ids.WANDB
# WANDB_*_DIR values this module set (an in-process sweep's next job moves them along).
_SET_BY_US: dict[str, str] = {}
# W&B refuses these in project names.
_BAD_PROJECT = re.compile(r"[/\\#?%:]")


def has_api_key() -> bool:
    """An API key in the environment, or a `wandb login` entry in the netrc file."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        hosts = netrc.netrc(str(path)).hosts
    except (OSError, netrc.NetrcParseError):
        return False
    return any(host.startswith("api.wandb.ai") for host in hosts)


def wandb_logger(
    save_dir: str,
    project: str = "litforge",
    mode: str = "auto",
    name: str | None = None,
    group: str | None = None,
    tags: list[str] | None = None,
    entity: str | None = None,
    log_model: bool | str = False,
    checkpoint_reference: bool = False,
    init_timeout_s: float = 30.0,
) -> WandbLogger:
    """Lightning's WandbLogger, configured as this module's docstring says. Online, rank 0
    starts the W&B run here: a server it cannot reach within `init_timeout_s` is one
    warning line and the run logs offline instead of dying in wandb.init."""
    if mode not in MODES:
        raise ConfigError(f"logger.wandb.mode={mode} is not one of: {', '.join(MODES)}")
    if not project or _BAD_PROJECT.search(project) or len(project) > 128:
        raise ConfigError(
            f"logger.wandb.project={project!r}: W&B refuses empty names, names over 128 "
            "characters and the characters / \\ # ? % :"
        )
    online = has_api_key()
    if mode == "auto" and os.environ.get("WANDB_MODE"):
        # Passing a mode to wandb.init overrides WANDB_MODE: the user's setting decides.
        mode = {"dryrun": "offline", "run": "online"}.get(
            os.environ["WANDB_MODE"], os.environ["WANDB_MODE"]
        )
        if mode not in MODES[1:]:
            raise ConfigError(f"WANDB_MODE={mode} is not one of: online, offline, disabled")
    if mode == "online" and not online:
        raise ConfigError(
            "logger.wandb.mode=online needs an API key: export WANDB_API_KEY=... or run "
            "`wandb login` once (or use logger.wandb.mode=auto to log offline without one)"
        )
    effective = ("online" if online else "offline") if mode == "auto" else mode
    run_dir = Path(save_dir)
    for var, sub in (("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config"),
                     ("WANDB_DATA_DIR", "data")):  # fmt: skip
        # The user's own setting wins; one litforge set for an earlier run is replaced.
        if os.environ.get(var) in (None, _SET_BY_US.get(var)):
            os.environ[var] = _SET_BY_US[var] = str(run_dir / "wandb" / sub)
    if effective == "offline" and rank_zero_only.rank == 0:
        log.info(
            "wandb: logging offline to %s (%s); upload later with: wandb sync %s",
            run_dir / "wandb", "WANDB_MODE=offline" if online else "no API key",
            run_dir / "wandb" / "offline-run-*",
        )  # fmt: skip
    try:
        import wandb
    except ImportError as err:
        raise ConfigError(
            f"logger=wandb needs the wandb package, which is not installed ({err}); "
            "pip install 'wandb>=0.31,<0.32', or pick another logger= (csv, tensorboard)"
        ) from None

    def make(run_mode: str) -> WandbLogger:
        logger = WandbLogger(
            save_dir=str(run_dir),
            project=project,
            name=name,
            group=group,
            tags=list(tags or []),
            entity=entity,
            log_model=log_model,
            id=_run_id(run_dir),
            resume="allow",
            mode=run_mode,
            settings=wandb.Settings(silent=True, console="off", init_timeout=init_timeout_s),
        )
        # Lightning 2.6.6 always passes anonymous=None, which wandb 0.31 warns about.
        logger._wandb_init.pop("anonymous", None)
        logger.litforge_checkpoint_reference = checkpoint_reference  # tracking.log_end
        return logger

    logger = make(effective)
    if effective == "online" and rank_zero_only.rank == 0:
        try:
            logger.experiment  # noqa: B018 - starts the W&B run now, where a failure is ours
        except wandb.errors.Error as err:
            log.warning(
                "wandb: cannot reach the W&B server (%s); logging offline to %s instead, "
                "upload later with: wandb sync %s",
                str(err).splitlines()[0], run_dir / "wandb", run_dir / "wandb" / "offline-run-*",
            )  # fmt: skip
            wandb.teardown()  # else the service still holds the run id: "is in use"
            logger = make("offline")
    return logger


def _run_id(run_dir: Path) -> str:
    """The agent's id in a W&B sweep; the id kept in run_dir (a resumed run); else a new
    one, kept there by rank 0."""
    if os.environ.get("WANDB_RUN_ID"):  # set by `wandb agent` (conf/wandb_sweep.yaml)
        return os.environ["WANDB_RUN_ID"]
    run_id = run_ids.read(run_dir, ID_FILE)
    if run_id is None:
        run_id = uuid.uuid4().hex[:12]
        run_ids.keep(run_dir, ID_FILE, run_id)
    return run_id
