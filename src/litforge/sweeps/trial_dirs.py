"""Which directory a trial runs in, and the record there that says whose run it holds.

A trial's run directory holds its checkpoints and metrics.json: a trial that runs in it
resumes from that checkpoint, and one whose checkpoint already reached max_steps trains
nothing and reports the metrics it finds. So a directory is only ever run by the trial it
belongs to. `litforge-trial.json` in it records the study's name, the trial's number (the
first of a retry chain, which continues its run) and its parameters, written when the
sweep first gives the directory out. The same trial (a retry, a rerun of the command) finds
its record and continues. Any other (another study's trial of the same number in a shared
sweep directory; the same number with other parameters, after a study was started over
on a new journal) gets a directory of its own, `<study>-<number>` (then `-2`, `-3`, ...),
and one line says why: the sweep goes on, and the other run is neither resumed nor touched.
A directory with files but no readable record (a damaged one, or made by something else)
counts as another's.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from litforge.errors import ConfigError

log = logging.getLogger("litforge")

RECORD_NAME = "litforge-trial.json"
MAX_RECORD_BYTES = 64 * 1024  # a record is a few hundred bytes; a bigger file is not one


@dataclass(frozen=True)
class Owner:
    """The trial a run directory belongs to: `trial` is the lineage's first number."""

    study: str
    trial: int
    params: dict[str, Any] = field(default_factory=dict)

    def as_record(self) -> dict[str, Any]:
        # Through JSON once, so that a record read back compares equal (tuples, numpy-free).
        return json.loads(json.dumps(asdict(self), sort_keys=True, default=str))


def claim(sweep_dir: Path, owner: Owner) -> Path:
    """The run directory of `owner` in `sweep_dir`: the one that records it, else the first
    free one, which is created with `owner`'s record."""
    first = sweep_dir / str(owner.trial)
    for path in candidates(sweep_dir, owner):
        found = read(path)
        if found == owner.as_record():
            return path
        if found is None and _free(path) and _write(path, owner):
            if path != first:
                log.warning(
                    "trial %d of study %s runs in %s: %s %s, and a trial never continues "
                    "another's run", owner.trial, owner.study, path, first, _whose(first),
                )  # fmt: skip
            return path
    raise AssertionError("unreachable: candidates() does not end")


def candidates(sweep_dir: Path, owner: Owner) -> Iterator[Path]:
    """`<number>`, then `<study>-<number>`, `<study>-<number>-2`, ... in `sweep_dir`."""
    yield sweep_dir / str(owner.trial)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", owner.study).lstrip(".") or "study"
    yield sweep_dir / f"{safe}-{owner.trial}"
    for n in itertools.count(2):
        yield sweep_dir / f"{safe}-{owner.trial}-{n}"


def read(path: Path) -> dict[str, Any] | None:
    """The record in run directory `path`; None without one (or unreadable: not a regular
    file, too big, not JSON of the expected shape), which is never anyone's."""
    record = path / RECORD_NAME
    try:
        if not record.is_file() or record.stat().st_size > MAX_RECORD_BYTES:
            return None  # a FIFO would block the read; a huge file is not a record
        data = json.loads(record.read_bytes()[:MAX_RECORD_BYTES])
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or set(data) != {"study", "trial", "params"}:
        return None
    return data if isinstance(data["params"], Mapping) else None


def _free(path: Path) -> bool:
    """No directory yet, or an empty one (a record written there is the first file)."""
    if not path.exists() and not path.is_symlink():
        return True
    try:
        return path.is_dir() and not path.is_symlink() and not any(path.iterdir())
    except OSError:
        return False


def _write(path: Path, owner: Owner) -> bool:
    """Write `owner`'s record into `path` unless a record got there first (another worker,
    another study); whether `path` is now `owner`'s."""
    record = path / RECORD_NAME
    staged = path / f".{RECORD_NAME}.{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps(owner.as_record(), sort_keys=True, indent=1) + "\n")
        os.link(staged, record)  # atomic and exclusive: the whole record, or the other's
    except FileExistsError:
        return read(path) == owner.as_record()
    except OSError as err:
        raise ConfigError(
            f"cannot write {record} for trial {owner.trial} of study {owner.study} "
            f"({err.strerror or err}); hydra.sweep.dir must be a directory litforge can write"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            staged.unlink()
    return True


def _whose(path: Path) -> str:
    found = read(path)
    if found is None:
        return f"holds a run without a readable {RECORD_NAME}"
    return f"holds trial {found['trial']} of study {found['study']} with {found['params']}"
