"""Which devices the launcher hands out, and how a trial process is told its own."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from litforge.errors import ConfigError
from litforge.run_record import TRIAL_DEVICE_UUIDS_ENV, TRIAL_DEVICES_ENV
from litforge.sweeps.pool.settings import LauncherSettings

log = logging.getLogger("litforge")

# Set in each trial's environment; run_record copies them into run.json.
IDS_ENV, UUIDS_ENV = TRIAL_DEVICES_ENV, TRIAL_DEVICE_UUIDS_ENV


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_ids(setting: Any) -> list[int] | None:
    """hydra.launcher.devices as a list of ids, None for auto (which ids are visible is
    checked at launch); one line for any other form (LauncherSettings' rule)."""
    ids = LauncherSettings.checked(devices=setting).devices
    if ids in (None, "auto"):
        return None
    return [ids] if isinstance(ids, int) else list(ids)


def resolve(setting: Any, visible: int) -> list[int]:
    """hydra.launcher.devices: `auto` (every visible GPU) or a list of ids. A list is taken
    as given on a machine without GPUs (trials then run on CPU, side by side)."""
    if setting in (None, "auto"):
        if visible == 0:
            log.warning(
                "hydra.launcher.devices=auto: no GPU visible, so one trial at a time on CPU "
                "(hydra.launcher.devices=[0,1] runs two side by side)"
            )
            return [0]
        return list(range(visible))
    ids = device_ids(setting) or []
    missing = [i for i in ids if i >= visible] if visible else []
    if missing:
        mask = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={mask})" if mask is not None else ""
        raise ConfigError(
            f"hydra.launcher.devices={ids}: device {missing[0]} is not visible; this machine "
            f"shows {visible} GPU(s){where}, ids 0 to {visible - 1}"
        )
    return ids


def cuda_mask(ids: list[int]) -> str:
    """CUDA_VISIBLE_DEVICES for a trial on `ids`, through this process's own mask."""
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not mask:
        return ",".join(map(str, ids))
    entries = [e.strip() for e in mask.split(",")]
    return ",".join(entries[i] if i < len(entries) else str(i) for i in ids)


@dataclass(frozen=True)
class Cards:
    """What the visible GPUs are: UUIDs and free bytes, by id (empty on CPU)."""

    uuids: list[str] = field(default_factory=list)
    free: list[int] = field(default_factory=list)


_PROBE = (
    "import json, torch\n"
    "n = torch.cuda.device_count()\n"
    "print(json.dumps([[str(torch.cuda.get_device_properties(i).uuid) for i in range(n)],"
    " [torch.cuda.mem_get_info(i)[0] for i in range(n)]]))"
)


def probe(visible: int) -> Cards:
    """The visible GPUs, asked in a process of its own: a CUDA context in the sweep process
    would hold memory on every card for as long as the sweep runs."""
    if not visible:
        return Cards()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300
    )
    try:
        uuids, free = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ConfigError(
            f"hydra.launcher.devices: could not query the {visible} visible GPU(s): "
            f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}"
        ) from None
    return Cards(uuids, free)


def environment(ids: list[int], cards: Cards, cpu_threads: int | None) -> dict[str, str]:
    """What a trial's process is started with: its devices, and on CPU its share of cores."""
    env = {"CUDA_VISIBLE_DEVICES": cuda_mask(ids), IDS_ENV: ",".join(map(str, ids))}
    if cards.uuids:
        env[UUIDS_ENV] = ",".join(cards.uuids[i] for i in ids)
    if cpu_threads is not None:  # torch takes its intra-op threads from these at start
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(cpu_threads)
    return env
