"""hydra.launcher.* of `hydra/launcher=gpus`: the keys, their defaults, their checks.

Checked when the launcher is set up, before the sweeper asks for any trial: a bad value is
one line and no trial is asked, run or retried for it. conf/hydra/launcher/gpus.yaml
documents each key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litforge.errors import ConfigError
from litforge.sweeps.pool import packing
from litforge.sweeps.pool.devices import device_ids

# Machine-wide, not per user: the GPUs belong to the machine, and $XDG_RUNTIME_DIR is one
# user's (two users' sweeps would not see each other's leases there). Local, not shared:
# flock on a network filesystem would lease one machine's devices to another's sweeps.
LEASE_DIR = "/tmp/litforge-devices"

DEFAULTS: dict[str, Any] = {
    "devices": "auto",
    "per_device": 1,
    "margin": 0.1,
    "stagger_s": 2.0,
    "kill_after_s": 60.0,
    "share_devices": False,
    "lease_dir": LEASE_DIR,
}


def check(settings: dict[str, Any]) -> None:
    """Every key known and every value valid, or one ConfigError line."""
    unknown = sorted(k for k in settings if k not in DEFAULTS and k != "_target_")
    if unknown:
        raise ConfigError(
            f"hydra.launcher.{unknown[0]}: not a setting of hydra/launcher=gpus; its keys are "
            + ", ".join(DEFAULTS)
        )
    device_ids(settings.get("devices", "auto"))
    packing.check(settings.get("per_device", 1), settings.get("margin", 0.1))
    stagger = settings.get("stagger_s", 0.0)
    if isinstance(stagger, bool) or not isinstance(stagger, int | float) or stagger < 0:
        raise ConfigError(
            f"hydra.launcher.stagger_s={stagger}: give the seconds between two trial starts, "
            "a number >= 0"
        )
    grace = settings.get("kill_after_s", DEFAULTS["kill_after_s"])
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 < grace <= 3600:
        raise ConfigError(
            f"hydra.launcher.kill_after_s={grace}: give the seconds a trial has to stop after "
            "SIGTERM before it is killed, a number above 0 and at most 3600 (default 60)"
        )
    share = settings.get("share_devices", False)
    if not isinstance(share, bool):
        raise ConfigError(
            f"hydra.launcher.share_devices={share}: give true (trials may share a device with "
            "another sweep on this machine) or false (wait for a free one; the default)"
        )
    lease_dir = settings.get("lease_dir", LEASE_DIR)
    if not isinstance(lease_dir, str | Path) or not str(lease_dir).strip():
        raise ConfigError(
            f"hydra.launcher.lease_dir={lease_dir}: give a directory on this machine's local "
            f"disk for the device leases (default {LEASE_DIR})"
        )


def get(settings: dict[str, Any], key: str) -> Any:
    return settings.get(key, DEFAULTS[key])
