"""Whether a directory can be made and written, asked before anything runs there."""

from __future__ import annotations

import os
from pathlib import Path


def unwritable(target: Path) -> str | None:
    """Why `target` (a directory, made if need be) cannot be written, or None. Decided at
    the nearest part of it that exists: not a directory, or not writable by this user
    (access(2) also says no on a read-only filesystem, even to root)."""
    target = target.absolute()
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None
