"""A checkpoint's name and its completeness marker: `step-00000120.ckpt.complete`, the JSON
manifest (size, sha256, step, monitored metric) a save writes once the checkpoint's upload
succeeded. A marker is read back from a store anyone with write access could have changed,
so its record is checked field by field: a damaged one is a ValueError, never a checkpoint
taken for complete."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MARKER_SUFFIX = ".complete"
_MAX_MARKER_BYTES = 4096
_NAME = re.compile(r"^step-(\d{8})\.ckpt$")


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.ckpt"


def step_of(name: str) -> int | None:
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Manifest:
    """What the completeness marker records about one uploaded checkpoint."""

    name: str
    step: int
    bytes: int
    sha256: str
    metric: float | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """The marker's record; ValueError (one line) when it is not one a save wrote:
        damaged, cut short, or of another shape."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        name, step, size, sha, metric = (data.get(k) for k in ("name", "step", "bytes",
                                                                "sha256", "metric"))  # fmt: skip
        if not isinstance(name, str) or step_of(name) is None:
            raise ValueError(f"name {name!r} is not a checkpoint's")
        for key, value in (("step", step), ("bytes", size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{key} {value!r} is not a count")
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError("sha256 is not 64 hex digits")
        return cls(name, step, size, sha, _metric(metric))


def _metric(value: object) -> float | None:
    """The monitored metric a marker records: None, or a number a float holds."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"metric {value!r} is not a number")
    if isinstance(value, int) and abs(value) > 1e308:  # float() would overflow
        raise ValueError(f"metric {value!r} is out of range")
    return float(value)
