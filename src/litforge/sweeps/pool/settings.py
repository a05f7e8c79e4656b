"""hydra.launcher.* of `hydra/launcher=gpus`: the keys, their defaults, their rules.

Checked when the launcher is set up, before the sweeper asks for any trial: a bad value is
one line and no trial is asked, run or retried for it. conf/hydra/launcher/gpus.yaml is
generated from LauncherSettings (`litforge config --write`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from litforge.errors import ConfigError
from litforge.settings import Settings, key
from litforge.settings.rules import Bool, Num, OneOf, Rule, Text


class DeviceIds(Rule):
    """auto (or null), one device id, or a list of distinct ids."""

    null = True

    def accepts(self, value: Any) -> bool:
        ids = [value] if isinstance(value, int) else value
        return value == "auto" or (
            isinstance(ids, list)
            and len(ids) > 0
            and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
            and len(set(ids)) == len(ids)
        )

    def text(self) -> str:
        return "auto, a device id, or a list of distinct device ids >= 0"


@dataclass(frozen=True)
class LauncherSettings(Settings):
    """litforge's device-pool launcher (hydra/launcher=gpus): every trial of a sweep a process
    of its own running train.py, with its own CUDA_VISIBLE_DEVICES, side by side."""

    GROUP = "hydra.launcher"
    TITLE = "hydra.launcher (hydra/launcher=gpus)"
    GROUP_FILE = "hydra/launcher/gpus.yaml"
    NODE = ""  # the file is the node: Hydra's hydra/launcher group puts it at hydra.launcher
    TARGET = "hydra_plugins.litforge_gpus.gpus_launcher.GpusLauncher"
    HEADER = """
litforge's device-pool launcher (src/hydra_plugins/litforge_gpus): every trial of a sweep
a process of its own running train.py, with its own CUDA_VISIBLE_DEVICES, side by side.
  python train.py -m hparams_search=digits_optuna hydra/launcher=gpus hydra.sweeper.n_jobs=4
A trial with trainer.devices=d takes d devices and starts its own DDP ranks, so N/d trials
run at once. Each trial's run.json and the sweep's trials.csv record its devices.
With litforge's Optuna sweeper each trial is asked and started the moment devices for it
free, at most hydra.sweeper.n_jobs at once: set it to what the devices hold (4 cards,
trainer.devices=1: n_jobs=4). Other sweepers hand over batches, each job started as its
devices free.
"""

    devices: str | int | list[int] | None = key(
        "auto",
        DeviceIds(),
        "auto: every visible GPU (one trial at a time on a machine without one), or a list of ids, e.g. [0,1,2,3]. A list is taken as given on CPU: the trials then share the cores.",
        error="{key}={value}: give auto (every visible GPU) or a list of distinct device ids "
        ">= 0, e.g. [0,1,2,3]",
    )
    per_device: int | str = key(
        1,
        OneOf((1, "auto")),
        "1: one trial per device. auto: as many per card as the memory budget (python -m litforge.budget) fits, less the margin; the sweep says in one line how many and why.",
        error="{key}={value}: give 1 (one trial per device) or auto (as many as the memory "
        "budget fits)",
    )
    margin: float = key(
        0.1,
        Num(0.0, 1.0, open_hi=True),
        "share of a card's free memory kept unused when packing (per_device=auto)",
        error="{key}={value}: give the share of usable memory kept free, a number from 0 to "
        "below 1 (default {default:g})",
    )
    stagger_s: float = key(
        2.0,
        Num(0.0),
        "seconds between two trial starts, so N trials do not all import and load at once",
        error="{key}={value}: give the seconds between two trial starts, a number >= 0",
    )
    kill_after_s: float = key(
        60.0,
        Num(0.0, 3600.0, open_lo=True),
        "SIGTERM/SIGUSR1 to the sweep (or the sweep's death, kill -9 included) reach every trial, which checkpoints and stops; whatever of a trial (its DDP ranks, dataloader workers) is still running this many seconds later is killed (SIGKILL), whatever it is doing.",
        error="{key}={value}: give the seconds a trial has to stop after SIGTERM before it is "
        "killed, a number above 0 and at most 3600 (default {default:g})",
    )
    share_devices: bool = key(
        False,
        Bool(),
        "true: no leases, trials may share a device with another sweep's",
        error="{key}={value}: give true (trials may share a device with another sweep on this "
        "machine) or false (wait for a free one; the default)",
    )
    # Machine-wide, not per user: the GPUs belong to the machine, and $XDG_RUNTIME_DIR is one
    # user's (two users' sweeps would not see each other's leases there). Local, not shared:
    # flock on a network filesystem would lease one machine's devices to another's sweeps.
    lease_dir: str = key(
        "/tmp/litforge-devices",
        Text(r"(?s).*\S.*", "a directory on this machine's local disk"),
        "Device leases across the sweeps of this machine: a trial starts on a device only while no other sweep has a trial on it (one flock'ed file per device; the kernel drops a dead sweep's). Machine-wide and on local disk: the GPUs belong to the machine, not to a user.",
        error="{key}={value}: give a directory on this machine's local disk for the device "
        "leases (default {default})",
    )


def check(settings: Mapping[str, Any]) -> LauncherSettings:
    """The typed settings of the launcher's keyword arguments: every key known and every
    value valid, or one ConfigError line."""
    keys = LauncherSettings.defaults()
    unknown = sorted(k for k in settings if k not in keys and k != "_target_")
    if unknown:
        raise ConfigError(
            f"hydra.launcher.{unknown[0]}: not a setting of hydra/launcher=gpus; its keys are "
            + ", ".join(keys)
        )
    return LauncherSettings.checked(**{k: v for k, v in settings.items() if k != "_target_"})
